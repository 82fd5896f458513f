package decorator

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/client-go/tools/cache"

	"github.com/watchkeeper/watchkeeper/cacher"
	"github.com/watchkeeper/watchkeeper/options"
)

// readiness is a storage whose readiness the test sets.
type readiness struct {
	storage.Interface
	err error
}

func (r readiness) ReadinessCheck() error { return r.err }

// stub is a decorator handing out the storage the test chose per resource.
func stub(stores map[string]storage.Interface, destroyed map[string]int) *Decorator {
	return track(func(config *storagebackend.ConfigForResource, _ string, _ generic.CacheKeyFunc,
		_ storage.ReverseKeyFunc, _, _ func() runtime.Object, _ storage.AttrFunc, _ storage.IndexerFuncs, _ *cache.Indexers,
	) (storage.Interface, factory.DestroyFunc, error) {
		name := config.GroupResource.String()
		return stores[name], func() { destroyed[name]++ }, nil
	})
}

func decorate(t *testing.T, d *Decorator, gr schema.GroupResource) factory.DestroyFunc {
	t.Helper()
	_, destroy, err := d.Decorate(&storagebackend.ConfigForResource{GroupResource: gr}, "/"+gr.Resource, nil, nil, nil, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return destroy
}

var (
	widgets = schema.GroupResource{Group: "demo.watchkeeper.io", Resource: "widgets"}
	gadgets = schema.GroupResource{Group: "demo.watchkeeper.io", Resource: "gadgets"}
)

// The readiness check fails until every storage the decorator made is
// ready, and says which is not; a destroyed one no longer counts.
func TestReadinessCheckWaitsForEveryStore(t *testing.T) {
	stores := map[string]storage.Interface{
		widgets.String(): readiness{},
		gadgets.String(): readiness{err: storage.ErrStorageNotReady},
	}
	destroyed := map[string]int{}
	d := stub(stores, destroyed)
	if err := d.ReadinessCheck(); err == nil {
		t.Fatal("ready before any storage exists")
	}
	decorate(t, d, widgets)
	destroyGadgets := decorate(t, d, gadgets)
	err := d.ReadinessCheck()
	if err == nil || !strings.Contains(err.Error(), "gadgets.demo.watchkeeper.io") || strings.Contains(err.Error(), "widgets") {
		t.Fatalf("with gadgets not ready: %v", err)
	}
	destroyGadgets()
	destroyGadgets()
	if destroyed[gadgets.String()] != 1 {
		t.Errorf("destroy ran %d times, want once", destroyed[gadgets.String()])
	}
	if err := d.ReadinessCheck(); err != nil {
		t.Fatalf("gadgets destroyed, widgets ready: %v", err)
	}
}

// quietStorage is just enough storage for a cache to list (empty) and
// watch (nothing comes).
type quietStorage struct{ storage.Interface }

func (quietStorage) GetList(_ context.Context, _ string, _ storage.ListOptions, list runtime.Object) error {
	list.(*example.PodList).ResourceVersion = "1"
	return nil
}
func (quietStorage) Watch(context.Context, string, storage.ListOptions) (watch.Interface, error) {
	return watch.NewFake(), nil
}
func (quietStorage) RequestWatchProgress(context.Context) error { return nil }
func (quietStorage) GetCurrentResourceVersion(context.Context) (uint64, error) {
	return 1, nil
}
func (quietStorage) CompactRevision() int64                              { return 0 }
func (quietStorage) EnableResourceSizeEstimation(storage.KeysFunc) error { return nil }
func (quietStorage) Versioner() storage.Versioner                        { return storage.APIObjectVersioner{} }

func newQuietCache(t *testing.T, gr schema.GroupResource) *cacher.Cacher {
	t.Helper()
	cfg := Schedule(options.NewWatchCacheOptions(), gr)
	cfg.Storage = quietStorage{}
	cfg.ResourcePrefix = "/" + gr.Resource + "/"
	cfg.KeyFunc = func(obj runtime.Object) (string, error) { return storage.NamespaceKeyFunc("/"+gr.Resource+"/", obj) }
	cfg.NewFunc = func() runtime.Object { return &example.Pod{} }
	cfg.NewListFunc = func() runtime.Object { return &example.PodList{} }
	cfg.GetAttrsFunc = storage.DefaultNamespaceScopedAttr
	c, err := cacher.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// Each decorator lists the caches it made, in order, until each is
// destroyed; another decorator in the same process sees none of them.
func TestCachesAreTheDecoratorsOwn(t *testing.T) {
	stores := map[string]storage.Interface{
		widgets.String(): newQuietCache(t, widgets),
		gadgets.String(): newQuietCache(t, gadgets),
	}
	destroyed := map[string]int{}
	d, other := stub(stores, destroyed), stub(stores, destroyed)
	destroyWidgets := decorate(t, d, widgets)
	decorate(t, d, gadgets)
	got := d.Caches()
	if len(got) != 2 || got[0].GroupResource() != gadgets || got[1].GroupResource() != widgets {
		t.Fatalf("Caches() = %v, want gadgets then widgets", got)
	}
	if n := len(other.Caches()); n != 0 {
		t.Errorf("another decorator lists %d caches, want 0", n)
	}
	destroyWidgets()
	if got := d.Caches(); len(got) != 1 || got[0].GroupResource() != gadgets {
		t.Errorf("after destroying widgets: Caches() = %v, want gadgets only", got)
	}
}
