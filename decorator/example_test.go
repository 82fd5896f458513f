package decorator_test

import (
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/generic"

	"github.com/watchkeeper/watchkeeper/decorator"
	"github.com/watchkeeper/watchkeeper/options"
)

// New validates the options and returns the generic.StorageDecorator that
// replaces registry.StorageWithCacher().
func ExampleNew() {
	opts := options.NewWatchCacheOptions()
	opts.BookmarkFrequency = 0
	if _, err := decorator.New(opts); err != nil {
		fmt.Println("refused:", err != nil)
	}
	d, err := decorator.New(nil) // nil: upstream's schedule
	fmt.Println(d != nil, err)
	// Output:
	// refused: true
	// true <nil>
}

// serverGetter stands for a server's own generic.RESTOptionsGetter.
type serverGetter struct{}

func (serverGetter) GetRESTOptions(gr schema.GroupResource, _ runtime.Object) (generic.RESTOptions, error) {
	if gr.Resource == "events" {
		// The server chose no cache for events.
		return generic.RESTOptions{Decorator: generic.UndecoratedStorage}, nil
	}
	return generic.RESTOptions{}, nil
}

// RESTOptionsGetter is the one line of a server's configuration that makes
// watchkeeper the watch cache of every resource the server caches; what it
// chose to leave uncached stays uncached.
func ExampleRESTOptionsGetter() {
	d, err := decorator.NewDecorator(nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	getter := decorator.RESTOptionsGetter(serverGetter{}, d.Decorate)
	for _, resource := range []string{"widgets", "events"} {
		opts, _ := getter.GetRESTOptions(schema.GroupResource{Resource: resource}, nil)
		uncached := reflect.ValueOf(opts.Decorator).Pointer() == reflect.ValueOf(generic.UndecoratedStorage).Pointer()
		fmt.Printf("%s: decorated %v, uncached %v\n", resource, opts.Decorator != nil, uncached)
	}
	// Output:
	// widgets: decorated true, uncached false
	// events: decorated true, uncached true
}

// ReadinessCheck fails until the decorator has made a cache and every cache
// it made is ready: a server's /readyz waits for its watch caches.
func ExampleDecorator_ReadinessCheck() {
	d, err := decorator.NewDecorator(nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(d.ReadinessCheck())
	// Output: no watch cache created yet
}

// NewDecorator is New keeping the decorator: Decorate is the
// generic.StorageDecorator, Caches the caches it made (none until the
// server's registries ask it for storage).
func ExampleNewDecorator() {
	d, err := decorator.NewDecorator(options.NewWatchCacheOptions())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(len(d.Caches()))
	// Output: 0
}
