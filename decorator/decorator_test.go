package decorator

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/generic"
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
	return generic.RESTOptions{ResourcePrefix: "/" + resource.Resource, Decorator: generic.UndecoratedStorage}, nil
}

func TestRESTOptionsGetterSetsTheDecorator(t *testing.T) {
	delegate := &fakeGetter{}
	called := false
	marker := generic.StorageDecorator(func(*storagebackend.ConfigForResource, string, func(runtime.Object) (string, error),
		func() runtime.Object, func() runtime.Object, storage.AttrFunc, storage.IndexerFuncs, *cache.Indexers,
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
	_, _, _ = got.Decorator(nil, "", nil, nil, nil, nil, nil, nil)
	if !called {
		t.Fatal("GetRESTOptions did not install the decorator")
	}
}
