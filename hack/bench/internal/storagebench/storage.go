// Package storagebench runs the storage-level scenarios: the decorated
// storage.Interface of one resource (example.Pod over a real etcd) driven
// directly, without HTTP, so the figures are the cache's own.
package storagebench

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/tools/cache"

	"github.com/watchkeeper/watchkeeper/decorator"
	"github.com/watchkeeper/watchkeeper/internal/fixtures"
	"github.com/watchkeeper/watchkeeper/options"
)

// Decorator names, as in result.Result.Decorator.
const (
	Upstream    = "upstream"
	Watchkeeper = "watchkeeper"
	// None is no cache, the floor a scenario's figures are read against:
	// bare channels for idle, and for exactkey one watch of etcd and a map
	// from key to channels (floorStorage).
	None = "none"
	// NoneHolding is None that also holds what any watch cache must: every
	// object, decoded, and the window's events with their previous objects
	// (holding, floor_holding.go). Not in make bench's plan: run by hand (`bench run
	// --scenario exactkey --decorator none-holding`) to see what holding
	// them costs a write with no cache's other work.
	NoneHolding = "none-holding"
)

// Env is where a child run's storage lives.
type Env struct {
	// EtcdEndpoint is the client URL of the etcd process.
	EtcdEndpoint string
	// Prefix is this run's etcd key prefix, so runs sharing the etcd never
	// see each other's objects or events.
	Prefix string
	// WindowProfile, when set, is where a scenario with a window of work
	// (exactkey's writes, restart's resumes) writes a CPU profile of just
	// that window: a whole-run profile is mostly setup.
	WindowProfile string
	// HeapProfile, when set, is where a scenario that measures the heap
	// (memory) writes a heap profile of the state it measures.
	HeapProfile string
	// Self is the bench binary, which a scenario starts again as a helper
	// process (WriterCommand).
	Self string
}

// Level is the result level of every figure of this package.
const Level = "storage"

// readyTimeout bounds the wait for the cache's first list and watch.
const readyTimeout = 60 * time.Second

// resource is what the storage of one kind of object is built from, the
// same for both caches, the floor and the raw storage that writes.
type resource struct {
	codec                runtime.Codec
	newFunc, newListFunc func() runtime.Object
	attrs                storage.AttrFunc
	triggers             func() storage.IndexerFuncs
	indexers             func() *cache.Indexers
}

var (
	// pods is example.Pod (package fixtures), every scenario's resource.
	pods = resource{codec: codec, newFunc: fixtures.NewPod, newListFunc: fixtures.NewPodList,
		attrs: fixtures.PodAttrs, triggers: fixtures.PodTriggers, indexers: podIndexers}
	// corePods is core/v1 Pod, the memory scenario's realistic pods.
	corePods = resource{codec: fixtures.CorePodCodec, newFunc: fixtures.NewCorePod, newListFunc: fixtures.NewCorePodList,
		attrs: fixtures.CorePodAttrs, triggers: fixtures.CorePodTriggers, indexers: func() *cache.Indexers {
			return &cache.Indexers{fixtures.NodeNameIndex: fixtures.CorePodNodeNameIndexFunc}
		}}
)

// openStorage builds the pods storage through the named decorator exactly as
// an apiserver's registry would (the decorator creates the raw etcd3 storage
// itself), waits until the cache serves reads, and returns it with its
// DestroyFunc. None is exactkey's floor, floorStorage over the raw storage.
func openStorage(ctx context.Context, env Env, name string) (storage.Interface, func(), error) {
	if name == None || name == NoneHolding {
		raw, rawDestroy, err := openRawStorage(env)
		if err != nil {
			return nil, nil, err
		}
		f := newFloorStorage(raw)
		if name == NoneHolding {
			h, err := holdEverything(ctx, raw)
			if err != nil {
				rawDestroy()
				return nil, nil, err
			}
			f.held = h
		}
		return f, func() { f.destroy(); rawDestroy() }, nil
	}
	s, destroy, err := buildCache(env, name, pods)
	if err != nil {
		return nil, nil, err
	}
	if err := waitReady(ctx, s, pods); err != nil {
		destroy()
		return nil, nil, fmt.Errorf("%s cache: %w", name, err)
	}
	return s, destroy, nil
}

// buildCache builds res's storage through the named cache's decorator and
// returns it at once, the cache still starting.
func buildCache(env Env, name string, res resource) (storage.Interface, func(), error) {
	var d generic.StorageDecorator
	switch name {
	case Upstream:
		d = registry.StorageWithCacher()
	case Watchkeeper, WatchkeeperUnshared, WatchkeeperCompact:
		opts := options.NewWatchCacheOptions()
		opts.ShareSiblings = name == Watchkeeper
		opts.Compact = name == WatchkeeperCompact
		var err error
		if d, err = decorator.New(opts); err != nil {
			return nil, nil, err
		}
	default:
		return nil, nil, fmt.Errorf("unknown decorator %q", name)
	}
	return decorate(env, name, d, res)
}

// decorate builds res's storage through d, as a registry would.
func decorate(env Env, name string, d generic.StorageDecorator, res resource) (storage.Interface, func(), error) {
	s, destroy, err := d(res.config(env), resourcePrefix,
		podKey, fixtures.PodReverseKeyFunc(resourcePrefix), res.newFunc, res.newListFunc, res.attrs, res.triggers(), res.indexers())
	if err != nil {
		return nil, nil, fmt.Errorf("building %s storage: %w", name, err)
	}
	return s, destroy, nil
}

// config is res's storage config, which both decorators (and the writers'
// raw storage) are built from.
func (res resource) config(env Env) *storagebackend.ConfigForResource {
	cfg := storagebackend.NewDefaultConfig(env.Prefix, res.codec)
	cfg.Transport.ServerList = []string{env.EtcdEndpoint}
	return cfg.ForResource(schema.GroupResource{Resource: "pods"})
}

// waitReady returns once the storage reports ready and a list from the cache
// succeeds: readiness alone does not promise the first list has landed in
// every implementation.
func waitReady(ctx context.Context, s storage.Interface, res resource) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for {
		err := s.ReadinessCheck()
		if err == nil {
			err = s.GetList(ctx, resourcePrefix, storage.ListOptions{
				ResourceVersion: "0", Predicate: storage.Everything, Recursive: true,
			}, res.newListFunc())
		}
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready after %v: %w", readyTimeout, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// currentRV is the resourceVersion a consistent list from the cache is at,
// and the number of objects in it: the revision a watch must start from to
// get no initial events, and proof the cache has caught up with etcd.
func currentRV(ctx context.Context, s storage.Interface) (string, int, error) {
	list := &example.PodList{}
	err := s.GetList(ctx, resourcePrefix, storage.ListOptions{
		ResourceVersion: "", Predicate: storage.Everything, Recursive: true,
	}, list)
	if err != nil {
		return "", 0, fmt.Errorf("consistent list: %w", err)
	}
	return list.ResourceVersion, len(list.Items), nil
}
