package registry

import (
	"context"
	"slices"
	"testing"
	"time"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"
	etcd3testing "k8s.io/apiserver/pkg/storage/etcd3/testing"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/client-go/tools/cache"

	"github.com/watchkeeper/watchkeeper/decorator"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/install"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/v1alpha1"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/registry/gadget"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/registry/widget"
)

// wiring is what the storage of one resource handed to the decorator.
type wiring struct {
	triggers storage.IndexerFuncs
	indexers *cache.Indexers
}

// harness is the demo group's storage on a real etcd, each resource
// wrapped in watchkeeper's cache, as the sample apiserver serves it.
type harness struct {
	storage map[string]rest.Storage
	wired   map[schema.GroupResource]wiring
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	scheme := runtime.NewScheme()
	install.Install(scheme)
	codec := serializer.NewCodecFactory(scheme).LegacyCodec(v1alpha1.SchemeGroupVersion)

	_, etcdCfg := etcd3testing.NewUnsecuredEtcd3TestClientServer(t)
	cfg := storagebackend.NewDefaultConfig(etcdCfg.Prefix, codec)
	cfg.Transport = etcdCfg.Transport

	d, err := decorator.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{wired: map[schema.GroupResource]wiring{}}
	getter := optionsGetter(func(gr schema.GroupResource) generic.RESTOptions {
		return generic.RESTOptions{
			StorageConfig: cfg.ForResource(gr),
			Decorator: func(config *storagebackend.ConfigForResource, resourcePrefix string, keyFunc generic.CacheKeyFunc, reverseKeyFunc storage.ReverseKeyFunc, newFunc, newListFunc func() runtime.Object, getAttrs storage.AttrFunc, triggers storage.IndexerFuncs, indexers *cache.Indexers) (storage.Interface, factory.DestroyFunc, error) {
				h.wired[gr] = wiring{triggers: triggers, indexers: indexers}
				return d(config, resourcePrefix, keyFunc, reverseKeyFunc, newFunc, newListFunc, getAttrs, triggers, indexers)
			},
			DeleteCollectionWorkers: 1,
			ResourcePrefix:          "/" + gr.Group + "/" + gr.Resource,
		}
	})
	h.storage, err = NewStorage(scheme, getter)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.storage["widgets"].Destroy()
		h.storage["gadgets"].Destroy()
	})
	for _, name := range []string{"widgets", "gadgets"} {
		s := h.store(name).Storage.Storage
		deadline := time.Now().Add(30 * time.Second)
		for s.ReadinessCheck() != nil {
			if time.Now().After(deadline) {
				t.Fatalf("%s: cache not ready after 30s", name)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return h
}

type optionsGetter func(schema.GroupResource) generic.RESTOptions

func (f optionsGetter) GetRESTOptions(gr schema.GroupResource, _ runtime.Object) (generic.RESTOptions, error) {
	return f(gr), nil
}

func (h *harness) store(path string) *genericregistry.Store {
	switch s := h.storage[path].(type) {
	case *widget.REST:
		return s.Store
	case *gadget.REST:
		return s.Store
	}
	panic("no store behind " + path)
}

func TestNewStorageServesFourPaths(t *testing.T) {
	h := newHarness(t)
	var paths []string
	for p := range h.storage {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	if want := []string{"gadgets", "gadgets/status", "widgets", "widgets/status"}; !slices.Equal(paths, want) {
		t.Fatalf("paths %v, want %v", paths, want)
	}
	for _, p := range []string{"widgets/status", "gadgets/status"} {
		if _, ok := h.storage[p].(rest.Patcher); !ok {
			t.Errorf("%s cannot be patched", p)
		}
		if _, ok := h.storage[p].(rest.Creater); ok {
			t.Errorf("%s can create", p)
		}
	}

	// Widgets hand the cache a trigger and an index on spec.nodeName;
	// gadgets neither.
	w := h.wired[demo.Resource("widgets")]
	if _, ok := w.triggers[widget.NodeNameField]; !ok || len(w.triggers) != 1 {
		t.Errorf("widget triggers %v, want spec.nodeName only", w.triggers)
	}
	if w.indexers == nil {
		t.Fatal("widgets have no indexers")
	}
	if _, ok := (*w.indexers)[storage.FieldIndex(widget.NodeNameField)]; !ok {
		t.Errorf("widget indexers %v, want f:spec.nodeName", *w.indexers)
	}
	if g := h.wired[demo.Resource("gadgets")]; len(g.triggers) != 0 || (g.indexers != nil && len(*g.indexers) != 0) {
		t.Errorf("gadgets wired with triggers %v and indexers %v, want none", g.triggers, g.indexers)
	}
}

func nsContext(ns string) context.Context {
	return genericapirequest.WithNamespace(context.Background(), ns)
}

func newWidget(name, node string) *demo.Widget {
	return &demo.Widget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec:       demo.WidgetSpec{Size: 1, Color: demo.WidgetColorBlue, NodeName: node},
		// Dropped on create: status is the status subresource's.
		Status: demo.WidgetStatus{Phase: demo.WidgetReady, ObservedGeneration: 9},
	}
}

func (h *harness) createWidget(t *testing.T, w *demo.Widget) *demo.Widget {
	t.Helper()
	out, err := h.store("widgets").Create(nsContext(w.Namespace), w, rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out.(*demo.Widget)
}

func (h *harness) updateWidget(t *testing.T, path string, w *demo.Widget) *demo.Widget {
	t.Helper()
	updater := h.storage[path].(rest.Updater)
	out, _, err := updater.Update(nsContext(w.Namespace), w.Name, rest.DefaultUpdatedObjectInfo(w), rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out.(*demo.Widget)
}

// The strategies run behind the real store: create drops status, the main
// resource never writes status, the status subresource never writes spec,
// and the generation counts spec changes.
func TestWidgetStatusSubresource(t *testing.T) {
	h := newHarness(t)
	w := h.createWidget(t, newWidget("a", "node-a"))
	if w.Status != (demo.WidgetStatus{}) || w.Generation != 1 {
		t.Fatalf("created with status %+v, generation %d; want empty status, generation 1", w.Status, w.Generation)
	}

	w.Spec.Size = 2
	w.Status.Phase = demo.WidgetReady
	w = h.updateWidget(t, "widgets", w)
	if w.Spec.Size != 2 || w.Status.Phase != "" || w.Generation != 2 {
		t.Fatalf("after a spec update: size %d, phase %q, generation %d; want 2, empty, 2", w.Spec.Size, w.Status.Phase, w.Generation)
	}

	w.Spec.Size = 3
	w.Status = demo.WidgetStatus{Phase: demo.WidgetReady, ObservedGeneration: 2}
	w = h.updateWidget(t, "widgets/status", w)
	if w.Spec.Size != 2 || w.Status.Phase != demo.WidgetReady || w.Status.ObservedGeneration != 2 || w.Generation != 2 {
		t.Fatalf("after a status update: size %d, status %+v, generation %d; want 2, Ready/2, 2", w.Spec.Size, w.Status, w.Generation)
	}

	w.Status.Phase = "Lost"
	_, _, err := h.storage["widgets/status"].(rest.Updater).Update(nsContext("ns"), "a", rest.DefaultUpdatedObjectInfo(w), rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{})
	if err == nil {
		t.Fatal("status update with phase Lost accepted")
	}
	if _, _, err := h.storage["widgets/status"].(rest.Updater).Update(nsContext("ns"), "missing", rest.DefaultUpdatedObjectInfo(newWidget("missing", "")), rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, true, &metav1.UpdateOptions{}); err == nil {
		t.Fatal("status update created a widget")
	}
}

// A field selector on spec.nodeName filters lists and watches, which the
// cache serves from its index and its trigger.
func TestWidgetNodeNameSelector(t *testing.T) {
	h := newHarness(t)
	store := h.store("widgets")
	ctx := nsContext("ns")
	h.createWidget(t, newWidget("a", "node-a"))
	b := h.createWidget(t, newWidget("b", "node-b"))

	onA := fields.OneTermEqualSelector("spec.nodeName", "node-a")
	w, err := store.Watch(ctx, &metainternalversion.ListOptions{FieldSelector: onA, ResourceVersion: b.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	b.Spec.Size = 5
	h.updateWidget(t, "widgets", b)
	c := h.createWidget(t, newWidget("c", "node-a"))

	select {
	case ev := <-w.ResultChan():
		obj := ev.Object
		// Watch caches send an encode-once wrapper; the typed object is
		// inside.
		if co, isCached := obj.(runtime.CacheableObject); isCached {
			obj = co.GetObject()
		}
		got, ok := obj.(*demo.Widget)
		if ev.Type != watch.Added || !ok || got.Name != "c" {
			t.Fatalf("first event %v %#v, want ADDED c (b's update is on node-b)", ev.Type, ev.Object)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no event within 30s")
	}

	list, err := store.List(ctx, &metainternalversion.ListOptions{FieldSelector: onA, ResourceVersion: c.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, item := range list.(*demo.WidgetList).Items {
		names = append(names, item.Name)
	}
	if !slices.Equal(names, []string{"a", "c"}) {
		t.Errorf("widgets on node-a: %v, want [a c]", names)
	}

	table, err := store.ConvertToTable(ctx, list, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(table.Rows) != 2 || len(table.ColumnDefinitions) != 5 || table.Rows[0].Cells[1] != int64(1) || table.Rows[0].Cells[2] != "blue" {
		t.Errorf("table %+v, want two rows of name, size 1, blue, phase, age", table)
	}
}

func TestGadgets(t *testing.T) {
	h := newHarness(t)
	store := h.store("gadgets")
	// The apiserver puts an empty namespace in the context of
	// cluster-scoped requests.
	ctx := nsContext(metav1.NamespaceNone)
	for _, g := range []*demo.Gadget{
		{ObjectMeta: metav1.ObjectMeta{Name: "g1"}, Spec: demo.GadgetSpec{Owner: "team-a", Replicas: 1}, Status: demo.GadgetStatus{ReadyReplicas: 4}},
		{ObjectMeta: metav1.ObjectMeta{Name: "g2"}, Spec: demo.GadgetSpec{Owner: "team-b"}},
	} {
		out, err := store.Create(ctx, g, rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := out.(*demo.Gadget); got.Status.ReadyReplicas != 0 || got.Namespace != "" {
			t.Errorf("created %+v, want no status and no namespace", got)
		}
	}
	if _, err := store.Create(ctx, &demo.Gadget{ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Spec: demo.GadgetSpec{Owner: "Team_A"}}, rest.ValidateAllObjectFunc, &metav1.CreateOptions{}); err == nil {
		t.Error("gadget with an invalid owner created")
	}

	list, err := store.List(ctx, &metainternalversion.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.owner", "team-b")})
	if err != nil {
		t.Fatal(err)
	}
	if items := list.(*demo.GadgetList).Items; len(items) != 1 || items[0].Name != "g2" {
		t.Errorf("gadgets of team-b: %+v, want g2", items)
	}

	g, err := store.Get(ctx, "g1", &metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g1 := g.(*demo.Gadget)
	g1.Spec.Replicas = 7
	g1.Status = demo.GadgetStatus{Phase: "Running", ReadyReplicas: 1}
	out, _, err := h.storage["gadgets/status"].(rest.Updater).Update(ctx, "g1", rest.DefaultUpdatedObjectInfo(g1), rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := out.(*demo.Gadget); got.Spec.Replicas != 1 || got.Status.Phase != "Running" || got.Status.ReadyReplicas != 1 {
		t.Errorf("after a status update: %+v %+v, want replicas 1, Running, 1 ready", got.Spec, got.Status)
	}
}
