// Package install registers the demo.watchkeeper.io API group in a scheme.
package install

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/v1alpha1"
)

// Install adds the internal and v1alpha1 types of the demo group to scheme,
// with conversions, defaults and field label conversions, and makes v1alpha1
// the preferred (storage) version. It panics if registration fails, which
// only a programming error can cause.
func Install(scheme *runtime.Scheme) {
	utilruntime.Must(demo.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	utilruntime.Must(scheme.SetVersionPriority(v1alpha1.SchemeGroupVersion))
}
