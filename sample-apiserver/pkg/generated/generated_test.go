// Package generated_test checks that the generated code fits the types:
// the clientset, its fake, the apply configurations, informers and listers,
// and the OpenAPI definitions under the names the apiserver looks up.
package generated_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"k8s.io/utils/ptr"

	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/install"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/v1alpha1"
	demoapply "github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/generated/applyconfiguration/demo/v1alpha1"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/generated/clientset/versioned"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/generated/clientset/versioned/fake"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/generated/informers/externalversions"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/generated/openapi"
)

func TestClientsetFromConfig(t *testing.T) {
	cs, err := versioned.NewForConfig(&rest.Config{Host: "https://127.0.0.1:6443"})
	if err != nil {
		t.Fatal(err)
	}
	var _ versioned.Interface = cs
	if cs.DemoV1alpha1().RESTClient() == nil {
		t.Fatal("no REST client for demo.watchkeeper.io/v1alpha1")
	}
}

func TestFakeClientset(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	widgets := cs.DemoV1alpha1().Widgets("ns")

	w, err := widgets.Create(ctx, &v1alpha1.Widget{
		ObjectMeta: metav1.ObjectMeta{Name: "w", Labels: map[string]string{"app": "demo"}},
		Spec:       v1alpha1.WidgetSpec{Size: 3, Color: v1alpha1.WidgetColorRed, NodeName: "node-a"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Status.Phase = v1alpha1.WidgetReady
	if _, err := widgets.UpdateStatus(ctx, w, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	list, err := widgets.List(ctx, metav1.ListOptions{LabelSelector: "app=demo"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Status.Phase != v1alpha1.WidgetReady {
		t.Errorf("listed %+v, want the one Ready widget", list.Items)
	}

	gadgets := cs.DemoV1alpha1().Gadgets()
	applied, err := gadgets.Apply(ctx, demoapply.Gadget("g").
		WithSpec(demoapply.GadgetSpec().WithOwner("team-a").WithReplicas(2)),
		metav1.ApplyOptions{FieldManager: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if applied.Spec.Owner != "team-a" || ptr.Deref(applied.Spec.Replicas, 0) != 2 {
		t.Errorf("applied gadget %+v", applied.Spec)
	}
}

func TestInformersAndListers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := fake.NewClientset(
		&v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: "ns"}},
		&v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: "g"}},
	)
	factory := externalversions.NewSharedInformerFactory(cs, time.Minute)
	widgets := factory.Demo().V1alpha1().Widgets().Lister()
	gadgets := factory.Demo().V1alpha1().Gadgets().Lister()
	factory.Start(ctx.Done())
	defer func() {
		cancel() // Shutdown waits for the informers, which stop on ctx.
		factory.Shutdown()
	}()
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("%v did not sync", typ)
		}
	}
	if w, err := widgets.Widgets("ns").Get("w"); err != nil || w.Name != "w" {
		t.Errorf("widget lister: %v, %v", w, err)
	}
	if gs, err := gadgets.List(labels.Everything()); err != nil || len(gs) != 1 {
		t.Errorf("gadget lister: %v, %v", gs, err)
	}
}

// The apiserver names each kind's definition with the scheme
// (runtime.Scheme.ToOpenAPIDefinitionName, which asks the type's generated
// OpenAPIModelName); every kind must find its definition under that name.
func TestOpenAPIDefinitionsByModelName(t *testing.T) {
	scheme := runtime.NewScheme()
	install.Install(scheme)
	defs := openapi.GetOpenAPIDefinitions(func(path string) spec.Ref { return spec.MustCreateRef("#/definitions/" + path) })
	for _, kind := range []string{"Widget", "WidgetList", "Gadget", "GadgetList"} {
		name, err := scheme.ToOpenAPIDefinitionName(v1alpha1.SchemeGroupVersion.WithKind(kind))
		if err != nil {
			t.Fatal(err)
		}
		if want := "com.github.watchkeeper.watchkeeper.sample-apiserver.pkg.apis.demo.v1alpha1." + kind; name != want {
			t.Errorf("%s is named %q, want %q", kind, name, want)
		}
		if _, ok := defs[name]; !ok {
			t.Errorf("no OpenAPI definition named %q", name)
		}
	}
	spec := defs["com.github.watchkeeper.watchkeeper.sample-apiserver.pkg.apis.demo.v1alpha1.WidgetSpec"].Schema
	if got := spec.Properties["color"].Enum; len(got) != 3 {
		t.Errorf("spec.color enum %v, want red, green, blue", got)
	}
	if !contains(spec.Required, "size") {
		t.Errorf("WidgetSpec required %v, want size", spec.Required)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
