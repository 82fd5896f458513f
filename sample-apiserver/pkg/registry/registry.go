// Package registry is the REST storage of the demo.watchkeeper.io group.
package registry

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/registry/gadget"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/registry/widget"
)

// Served lists the resources NewStorage serves, each with a watch cache of
// its own: what per-resource watch cache overrides may name.
func Served() []schema.GroupResource {
	return []schema.GroupResource{demo.Resource("widgets"), demo.Resource("gadgets")}
}

// NewStorage returns the REST storage of the demo group, keyed by resource path:
// "widgets", "widgets/status", "gadgets", "gadgets/status".
//
// scheme must have the group installed (install.Install); optsGetter hands
// out each resource's storage, with watchkeeper's decorator when the server
// wires it in (decorator.RESTOptionsGetter). On error nothing is left
// running.
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter) (map[string]rest.Storage, error) {
	widgets, widgetStatus, err := widget.NewREST(scheme, optsGetter)
	if err != nil {
		return nil, err
	}
	gadgets, gadgetStatus, err := gadget.NewREST(scheme, optsGetter)
	if err != nil {
		// The widgets' store may already run a watch cache.
		widgets.Destroy()
		return nil, err
	}
	return map[string]rest.Storage{
		"widgets":        widgets,
		"widgets/status": widgetStatus,
		"gadgets":        gadgets,
		"gadgets/status": gadgetStatus,
	}, nil
}
