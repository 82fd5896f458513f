// Package decorator plugs watchkeeper's watch cache into apiservers built
// with k8s.io/apiserver: New returns a generic.StorageDecorator, the type
// registry.StorageWithCacher() returns, and RESTOptionsGetter makes every
// resource of a server use it.
//
//	d, err := decorator.New(watchCacheOptions)
//	// ...
//	config.RESTOptionsGetter = decorator.RESTOptionsGetter(config.RESTOptionsGetter, d)
package decorator

import (
	"fmt"
	"maps"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/client-go/tools/cache"

	"github.com/watchkeeper/watchkeeper/cacher"
	"github.com/watchkeeper/watchkeeper/options"
)

// New validates opts and returns a decorator that wraps each resource's raw
// etcd3 storage in a watchkeeper cache configured by them. Nil opts means
// the defaults (upstream's schedule). The options are copied: changing them
// afterwards changes nothing.
func New(opts *options.WatchCacheOptions) (generic.StorageDecorator, error) {
	if opts == nil {
		opts = options.NewWatchCacheOptions()
	}
	if errs := opts.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("invalid watch cache options: %w", utilerrors.NewAggregate(errs))
	}
	o := *opts
	o.ResourceOverrides = maps.Clone(opts.ResourceOverrides)
	return func(
		config *storagebackend.ConfigForResource,
		resourcePrefix string,
		keyFunc func(obj runtime.Object) (string, error),
		newFunc func() runtime.Object,
		newListFunc func() runtime.Object,
		getAttrsFunc storage.AttrFunc,
		triggerFuncs storage.IndexerFuncs,
		indexers *cache.Indexers,
	) (storage.Interface, factory.DestroyFunc, error) {
		raw, destroyRaw, err := generic.NewRawStorage(config, newFunc, newListFunc, resourcePrefix)
		if err != nil {
			return nil, nil, err
		}
		r := o.ForResource(config.GroupResource)
		c, err := cacher.New(cacher.Config{
			Storage:                   raw,
			Versioner:                 storage.APIObjectVersioner{},
			GroupResource:             config.GroupResource,
			ResourcePrefix:            resourcePrefix,
			KeyFunc:                   keyFunc,
			NewFunc:                   newFunc,
			NewListFunc:               newListFunc,
			GetAttrsFunc:              getAttrsFunc,
			IndexerFuncs:              triggerFuncs,
			Indexers:                  indexers,
			BookmarkFrequency:         r.BookmarkFrequency,
			BookmarkPreDeadlineOffset: r.BookmarkPreDeadlineOffset,
			EventsHistoryWindow:       r.EffectiveEventsHistoryWindow(),
			BookmarkGranularity:       r.BookmarkGranularity,
			BookmarkJitter:            r.BookmarkJitter,
			BookmarkMaxStaleness:      r.BookmarkMaxStaleness,
			HistoryCapacity:           r.EventsHistoryCapacity,
			StorageSilenceTimeout:     silenceTimeout(r.StorageSilenceTimeout),
		})
		if err != nil {
			destroyRaw()
			return nil, nil, err
		}
		// The cache first, so it stops reading before its storage goes away.
		var once sync.Once
		destroy := func() {
			once.Do(func() {
				c.Stop()
				destroyRaw()
			})
		}
		return c, destroy, nil
	}, nil
}

// RESTOptionsGetter returns a getter that hands out delegate's options with
// d as the storage decorator of every resource: the one line that replaces
// registry.StorageWithCacher() in a server's configuration.
func RESTOptionsGetter(delegate generic.RESTOptionsGetter, d generic.StorageDecorator) generic.RESTOptionsGetter {
	return restOptionsGetter{delegate: delegate, decorator: d}
}

type restOptionsGetter struct {
	delegate  generic.RESTOptionsGetter
	decorator generic.StorageDecorator
}

func (g restOptionsGetter) GetRESTOptions(resource schema.GroupResource, example runtime.Object) (generic.RESTOptions, error) {
	opts, err := g.delegate.GetRESTOptions(resource, example)
	if err != nil {
		return opts, err
	}
	opts.Decorator = g.decorator
	return opts, nil
}

// silenceTimeout maps the flag's "0 turns it off" onto the cacher's "negative
// never" (where 0 means its default).
func silenceTimeout(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
