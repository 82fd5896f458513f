package decorator

import (
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/client-go/tools/cache"

	"github.com/watchkeeper/watchkeeper/options"
)

func TestNewReturnsEveryValidationError(t *testing.T) {
	o := options.NewWatchCacheOptions()
	o.BookmarkFrequency = 0
	o.BookmarkJitter = 3
	d, err := New(o)
	if d != nil || err == nil {
		t.Fatalf("New with invalid options = %v, %v; want an error", d, err)
	}
	for _, want := range []string{"--watch-cache-bookmark-frequency=0s", "--watch-cache-bookmark-jitter=3"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

func TestNewAcceptsDefaultsAndNil(t *testing.T) {
	for _, o := range []*options.WatchCacheOptions{nil, options.NewWatchCacheOptions()} {
		if d, err := New(o); err != nil || d == nil {
			t.Errorf("New(%v) = %v, %v", o, d, err)
		}
	}
}

type fakeGetter struct{ calls int }

func (f *fakeGetter) GetRESTOptions(resource schema.GroupResource, _ runtime.Object) (generic.RESTOptions, error) {
	f.calls++
	return generic.RESTOptions{ResourcePrefix: "/" + resource.Resource, Decorator: genericregistry.StorageWithCacher()}, nil
}

func TestRESTOptionsGetterSetsTheDecorator(t *testing.T) {
	delegate := &fakeGetter{}
	called := false
	marker := generic.StorageDecorator(func(*storagebackend.ConfigForResource, string, generic.CacheKeyFunc,
		storage.ReverseKeyFunc, func() runtime.Object, func() runtime.Object, storage.AttrFunc, storage.IndexerFuncs, *cache.Indexers,
	) (storage.Interface, factory.DestroyFunc, error) {
		called = true
		return nil, nil, nil
	})
	got, err := RESTOptionsGetter(delegate, marker).GetRESTOptions(schema.GroupResource{Resource: "widgets"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if delegate.calls != 1 || got.ResourcePrefix != "/widgets" {
		t.Fatalf("delegate's options not passed through: calls=%d prefix=%q", delegate.calls, got.ResourcePrefix)
	}
	_, _, _ = got.Decorator(nil, "", nil, nil, nil, nil, nil, nil, nil)
	if !called {
		t.Fatal("GetRESTOptions did not install the decorator")
	}
}

// getterOf answers with each resource's decorator as the server chose it.
type getterOf map[string]generic.StorageDecorator

func (g getterOf) GetRESTOptions(resource schema.GroupResource, _ runtime.Object) (generic.RESTOptions, error) {
	return generic.RESTOptions{Decorator: g[resource.Resource]}, nil
}

// A resource the server chose to serve uncached stays uncached; the others,
// cached by the server's choice or with no choice made, get watchkeeper.
func TestRESTOptionsGetterKeepsUncachedResourcesUncached(t *testing.T) {
	d, err := NewDecorator(nil)
	if err != nil {
		t.Fatal(err)
	}
	upstreamCached := generic.StorageDecorator(func(*storagebackend.ConfigForResource, string, generic.CacheKeyFunc,
		storage.ReverseKeyFunc, func() runtime.Object, func() runtime.Object, storage.AttrFunc, storage.IndexerFuncs, *cache.Indexers,
	) (storage.Interface, factory.DestroyFunc, error) {
		return nil, nil, nil
	})
	g := RESTOptionsGetter(getterOf{"events": generic.UndecoratedStorage, "pods": upstreamCached, "widgets": nil}, d.Decorate)
	for resource, wantOurs := range map[string]bool{"events": false, "pods": true, "widgets": true} {
		opts, err := g.GetRESTOptions(schema.GroupResource{Resource: resource}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := isOurs(opts.Decorator, d); got != wantOurs {
			t.Errorf("%s: watchkeeper's decorator installed = %v, want %v", resource, got, wantOurs)
		}
		if !wantOurs && !isUndecorated(opts.Decorator) {
			t.Errorf("%s: the server's UndecoratedStorage was replaced", resource)
		}
	}
}

// isOurs is whether got is d's Decorate: called on a resource, it makes d
// remember a storage.
func isOurs(got generic.StorageDecorator, d *Decorator) bool {
	return got != nil && !isUndecorated(got) && reflect.ValueOf(got).Pointer() == reflect.ValueOf(d.Decorate).Pointer()
}
