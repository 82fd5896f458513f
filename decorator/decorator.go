// Package decorator plugs watchkeeper's watch cache into apiservers built
// with k8s.io/apiserver: [New] returns a [generic.StorageDecorator], the type
// registry.StorageWithCacher() returns, and [RESTOptionsGetter] makes every
// resource of a server use it. It is the package a server imports; the
// others are what it is made of.
//
//	d, err := decorator.New(watchCacheOptions)
//	// ...
//	config.RESTOptionsGetter = decorator.RESTOptionsGetter(config.RESTOptionsGetter, d)
//
// The settings are an [options.WatchCacheOptions], which [Schedule] turns
// into each resource's [cacher.Config]; each resource's cache is a
// [cacher.Cacher], which schedules bookmarks with package
// [github.com/watchkeeper/watchkeeper/bookmarks] and follows the WatchList
// rules of package [github.com/watchkeeper/watchkeeper/watchlist].
//
// A server that also wants to see its caches (readiness, the debug view)
// keeps the [*Decorator] that [NewDecorator] returns: [Decorator.Decorate]
// is the generic.StorageDecorator, [Decorator.Caches] lists the caches it
// made, [Decorator.ReadinessCheck] is for /readyz, and
// [github.com/watchkeeper/watchkeeper/debugview.Handler] shows them. The
// decorator owns the caches it made, not the process, so two servers in
// one process each see their own. [Choose] and [Install] wire the
// --watch-cache-decorator flag ([options.AddDecoratorFlag]), so one binary
// runs watchkeeper or upstream's cache, and [Decorator.WatchesOnShutdown]
// lets watch clients resume at once when the server stops.
package decorator

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/cache"

	"github.com/watchkeeper/watchkeeper/cacher"
	"github.com/watchkeeper/watchkeeper/options"
)

// New validates opts and returns a decorator that wraps each resource's raw
// etcd3 storage in a watchkeeper cache configured by them. Nil opts means
// the defaults (upstream's schedule). The options are copied: changing them
// afterwards changes nothing.
func New(opts *options.WatchCacheOptions) (generic.StorageDecorator, error) {
	d, err := NewDecorator(opts)
	if err != nil {
		return nil, err
	}
	return d.Decorate, nil
}

// Decorator makes the storage of each resource it is given and remembers
// what it made, until the resource's storage is destroyed: nothing is
// process-wide, so two servers in one process each see their own caches.
type Decorator struct {
	decorate generic.StorageDecorator

	mu     sync.Mutex
	stores map[schema.GroupResource]storage.Interface
}

// NewDecorator is New, keeping the decorator's view of its caches.
func NewDecorator(opts *options.WatchCacheOptions) (*Decorator, error) {
	if opts == nil {
		opts = options.NewWatchCacheOptions()
	}
	if errs := opts.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("invalid watch cache options: %w", utilerrors.NewAggregate(errs))
	}
	o := *opts
	o.ResourceOverrides = maps.Clone(opts.ResourceOverrides)
	return track(watchkeeper(&o)), nil
}

// track wraps any storage decorator (upstream's registry.StorageWithCacher(),
// generic.UndecoratedStorage) so the server can check its storage's
// readiness the same way whichever cache it runs.
func track(d generic.StorageDecorator) *Decorator {
	return &Decorator{decorate: d, stores: map[schema.GroupResource]storage.Interface{}}
}

// Decorate is the generic.StorageDecorator.
func (d *Decorator) Decorate(
	config *storagebackend.ConfigForResource,
	resourcePrefix string,
	keyFunc generic.CacheKeyFunc,
	reverseKeyFunc storage.ReverseKeyFunc,
	newFunc func() runtime.Object,
	newListFunc func() runtime.Object,
	getAttrsFunc storage.AttrFunc,
	triggerFuncs storage.IndexerFuncs,
	indexers *cache.Indexers,
) (storage.Interface, factory.DestroyFunc, error) {
	s, destroy, err := d.decorate(config, resourcePrefix, keyFunc, reverseKeyFunc, newFunc, newListFunc, getAttrsFunc, triggerFuncs, indexers)
	if err != nil {
		return nil, nil, err
	}
	gr := config.GroupResource
	d.mu.Lock()
	d.stores[gr] = s
	d.mu.Unlock()
	var once sync.Once
	return s, func() {
		once.Do(func() {
			d.mu.Lock()
			if d.stores[gr] == s {
				delete(d.stores, gr)
			}
			d.mu.Unlock()
			destroy()
		})
	}, nil
}

// Caches lists the watchkeeper caches this decorator made and that are not
// destroyed, ordered by group and resource.
func (d *Decorator) Caches() []*cacher.Cacher {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []*cacher.Cacher
	for _, s := range d.stores {
		if c, ok := s.(*cacher.Cacher); ok {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b *cacher.Cacher) int {
		ga, gb := a.GroupResource(), b.GroupResource()
		return cmp.Or(cmp.Compare(ga.Group, gb.Group), cmp.Compare(ga.Resource, gb.Resource))
	})
	return out
}

// endWatches ends every client watch of the watchkeeper caches this
// decorator made, letting each client read what is queued first (see
// cacher.EndWatches); the caches keep running. A server's shutdown calls
// it (WatchesOnShutdown). It returns how many watches it ended.
func (d *Decorator) endWatches() int {
	n := 0
	for _, c := range d.Caches() {
		n += c.EndWatches()
	}
	return n
}

// ReadinessCheck fails while any storage it made is not ready (a cache
// relisting, or not yet synced), or before it made any: a server's /readyz
// waits for every watch cache.
func (d *Decorator) ReadinessCheck() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.stores) == 0 {
		return errors.New("no watch cache created yet")
	}
	var errs []error
	for _, gr := range slices.SortedFunc(maps.Keys(d.stores), func(a, b schema.GroupResource) int {
		return cmp.Compare(a.String(), b.String())
	}) {
		if err := d.stores[gr].ReadinessCheck(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", gr, err))
		}
	}
	return errors.Join(errs...)
}

// watchkeeper is the decorator that wraps raw etcd3 storage in a cache
// configured by o.
func watchkeeper(o *options.WatchCacheOptions) generic.StorageDecorator {
	return func(
		config *storagebackend.ConfigForResource,
		resourcePrefix string,
		keyFunc generic.CacheKeyFunc,
		reverseKeyFunc storage.ReverseKeyFunc,
		newFunc func() runtime.Object,
		newListFunc func() runtime.Object,
		getAttrsFunc storage.AttrFunc,
		triggerFuncs storage.IndexerFuncs,
		indexers *cache.Indexers,
	) (storage.Interface, factory.DestroyFunc, error) {
		raw, destroyRaw, err := generic.NewRawStorage(config, newFunc, newListFunc, reverseKeyFunc, resourcePrefix)
		if err != nil {
			return nil, nil, err
		}
		cfg := Schedule(o, config.GroupResource)
		cfg.Storage = raw
		cfg.Versioner = storage.APIObjectVersioner{}
		cfg.ResourcePrefix = resourcePrefix
		cfg.KeyFunc, cfg.NewFunc, cfg.NewListFunc, cfg.GetAttrsFunc = keyFunc, newFunc, newListFunc, getAttrsFunc
		cfg.IndexerFuncs, cfg.Indexers = triggerFuncs, indexers
		cfg.Codec = config.Codec
		cfg.StorageWatchWithoutPrevKV = reverseKeyFunc != nil &&
			utilfeature.DefaultFeatureGate.Enabled(features.WatchFromStorageWithoutPrevKV)
		c, err := cacher.New(cfg)
		if err != nil {
			destroyRaw()
			return nil, nil, err
		}
		// The cache first, so it stops reading before its storage goes away.
		return c, func() {
			c.Stop()
			destroyRaw()
		}, nil
	}
}

// RESTOptionsGetter returns a getter that hands out delegate's options with
// d as the storage decorator of every resource the delegate caches: the one
// line that replaces registry.StorageWithCacher() in a server's
// configuration. A resource the delegate chose to serve uncached
// (generic.UndecoratedStorage: --watch-cache=false, --watch-cache-sizes
// with a size of 0, kube-apiserver's events) stays uncached.
func RESTOptionsGetter(delegate generic.RESTOptionsGetter, d generic.StorageDecorator) generic.RESTOptionsGetter {
	return restOptionsGetter{delegate: delegate, decorator: d}
}

type restOptionsGetter struct {
	delegate  generic.RESTOptionsGetter
	decorator generic.StorageDecorator
}

func (g restOptionsGetter) GetRESTOptions(resource schema.GroupResource, example runtime.Object) (generic.RESTOptions, error) {
	opts, err := g.delegate.GetRESTOptions(resource, example)
	if err != nil || isUndecorated(opts.Decorator) {
		return opts, err
	}
	opts.Decorator = g.decorator
	return opts, nil
}

// isUndecorated is whether d is generic.UndecoratedStorage: the server's
// "no cache for this resource". Functions compare only by their code.
func isUndecorated(d generic.StorageDecorator) bool {
	return d != nil && reflect.ValueOf(d).Pointer() == reflect.ValueOf(generic.UndecoratedStorage).Pointer()
}

// Schedule is the cache configuration of gr's schedule under o, its
// per-resource overrides applied: the one place where options, which hold
// every default, become a cacher.Config, whose zero values are never
// defaults. The caller adds the resource's storage and functions.
func Schedule(o *options.WatchCacheOptions, gr schema.GroupResource) cacher.Config {
	r := o.ForResource(gr)
	return cacher.Config{
		GroupResource:             gr,
		BookmarkFrequency:         r.BookmarkFrequency,
		BookmarkPreDeadlineOffset: r.BookmarkPreDeadlineOffset,
		EventsHistoryWindow:       r.EffectiveEventsHistoryWindow(),
		BookmarkGranularity:       r.BookmarkGranularity,
		BookmarkJitter:            r.BookmarkJitter,
		BookmarkMaxStaleness:      r.BookmarkMaxStaleness,
		HistoryCapacity:           r.EventsHistoryCapacity,
		StorageSilenceTimeout:     r.StorageSilenceTimeout,
		WatcherBuffer:             cacher.DefaultWatcherBuffer,
		StallSlowWatchers:         r.StallSlowWatchers,
		MaxBytes:                  r.MaxBytes,
		ListBackfillRevisions:     cacher.DefaultListBackfillRevisions,
		BackfillMaxRevisions:      cacher.DefaultBackfillMaxRevisions,
		ShareSiblings:             r.ShareSiblings,
		Compact:                   r.Compact,
	}
}
