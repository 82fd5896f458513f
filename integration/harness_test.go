package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/etcd3"
	storagetesting "k8s.io/apiserver/pkg/storage/testing"
	"k8s.io/apiserver/pkg/storage/value"
	"k8s.io/apiserver/pkg/storage/value/encrypt/identity"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/watchkeeper/watchkeeper/cacher"
	"github.com/watchkeeper/watchkeeper/decorator"
	"github.com/watchkeeper/watchkeeper/internal/etcdtest"
	"github.com/watchkeeper/watchkeeper/internal/fixtures"
	"github.com/watchkeeper/watchkeeper/options"
)

var (
	// The codec and transformer upstream's cacher tests use.
	protoCodec  = fixtures.ProtoCodec
	transformer = identity.NewEncryptCheckTransformer()

	newPod     = fixtures.NewPod
	newPodList = fixtures.NewPodList
	podAttrs   = fixtures.PodAttrs
)

// env is one resource's cache over a real etcd, as the tests drive it.
type env struct {
	cacher   *cacher.Cacher
	raw      storage.Interface
	client   *kubernetes.Client
	recorder *storagetesting.KubernetesRecorder
	// storeSeesCompactions: the etcd3 store watches etcd's compaction key
	// (it started with ListFromCacheSnapshot on), so its CompactRevision
	// follows compactions made by others, as this package's are.
	storeSeesCompactions bool
}

type setupOption func(*cacher.Config)

// clusterScoped keys pods by name alone, as a cluster-scoped resource.
func clusterScoped(c *cacher.Config) {
	c.KeyFunc = func(obj runtime.Object) (string, error) { return storage.NoNamespaceKeyFunc("/pods/", obj) }
}

// nodeNameIndex adds the trigger and indexers upstream's tests use.
func nodeNameIndex(c *cacher.Config) {
	c.IndexerFuncs = fixtures.PodTriggers()
	c.Indexers = &cache.Indexers{
		fixtures.NodeNameIndex:  fixtures.NodeNameIndexFunc,
		fixtures.NamespaceIndex: fixtures.NamespaceIndexFunc,
	}
}

// withSchedule sets short bookmark timings for end-to-end tests.
func withSchedule(frequency, offset, window time.Duration) setupOption {
	return func(c *cacher.Config) {
		c.BookmarkFrequency, c.BookmarkPreDeadlineOffset, c.EventsHistoryWindow = frequency, offset, window
	}
}

// podCacheConfig is a pods cache over raw with the flags' defaults
// (upstream's schedule, as the conformance expectations assume), made the
// way the decorator makes it.
func podCacheConfig(raw storage.Interface) cacher.Config { return podCacheConfigFor(raw, "pods") }

// podCacheConfigFor is podCacheConfig for pods stored as another resource
// (newPodStore's resource), with its own metrics and gRPC stream.
func podCacheConfigFor(raw storage.Interface, resource string) cacher.Config {
	prefix := "/" + resource + "/"
	cfg := decorator.Schedule(options.NewWatchCacheOptions(), schema.GroupResource{Resource: resource})
	cfg.Storage = raw
	cfg.Versioner = storage.APIObjectVersioner{}
	cfg.ResourcePrefix = prefix
	cfg.KeyFunc = func(obj runtime.Object) (string, error) { return storage.NamespaceKeyFunc(prefix, obj) }
	cfg.NewFunc, cfg.NewListFunc, cfg.GetAttrsFunc = newPod, newPodList, podAttrs
	// As the decorator sets it: newPodStore gives the store a ReverseKeyFunc.
	cfg.StorageWatchWithoutPrevKV = utilfeature.DefaultFeatureGate.Enabled(features.WatchFromStorageWithoutPrevKV)
	// The store's codec, as the decorator passes the registry's: writes
	// start from the cache under ConsistentGetFromCache only with it.
	// setupStore sets the codec its store was built with.
	cfg.Codec = protoCodec
	return cfg
}

// setup starts etcd, the etcd3 store over it and our cache over that, and
// waits for the cache to be ready.
func setup(t *testing.T, opts ...setupOption) *env {
	t.Helper()
	return setupStore(t, protoCodec, transformer, opts...)
}

// setupStore is setup with the etcd3 store's codec and transformer given:
// the fault tests wrap them to fail on demand, as upstream's cacher tests do.
func setupStore(t *testing.T, codec runtime.Codec, tr value.Transformer, opts ...setupOption) *env {
	t.Helper()
	client := etcdtest.Start(t).KubernetesClient()
	// The etcd3 store reads the gate once, as it starts.
	seesCompactions := utilfeature.DefaultFeatureGate.Enabled(features.ListFromCacheSnapshot)
	withCodec := func(cfg *cacher.Config) { cfg.Codec = codec }
	e := startCache(t, client, newPodStore(t, client, codec, tr, "pods"), append([]setupOption{withCodec}, opts...)...)
	e.storeSeesCompactions = seesCompactions
	return e
}

// startCache starts our cache over raw, a store over client, and waits for
// it to be ready.
func startCache(t *testing.T, client *kubernetes.Client, raw storage.Interface, opts ...setupOption) *env {
	t.Helper()
	cfg := podCacheConfig(raw)
	for _, o := range opts {
		o(&cfg)
	}
	if fixtures.CompactTests() && cfg.Codec != nil {
		cfg.Compact = true
	}
	c, err := cacher.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatalf("cache not ready: %v", err)
	}
	rec, _ := client.Kubernetes.(*storagetesting.KubernetesRecorder)
	return &env{cacher: c, raw: raw, client: client, recorder: rec}
}

// etcdPathPrefix is the etcd3 store's path prefix: the keys in the store's
// conflict errors carry it, so the conformance tests that check them are
// given it, as upstream's cacher tests pass etcd3testing.PathPrefix().
const etcdPathPrefix = "/registry"

// newPodStore is the etcd3 store of pods under /registry/<resource>/, as
// the resource <resource>, over client. Several stores may share one client,
// as the caches of one server may.
func newPodStore(t *testing.T, client *kubernetes.Client, codec runtime.Codec, tr value.Transformer, resource string) storage.Interface {
	t.Helper()
	versioner := storage.APIObjectVersioner{}
	compactor := etcd3.NewCompactor(client.Client, 0, clock.RealClock{}, nil)
	t.Cleanup(compactor.Stop)
	raw, err := etcd3.New(client, compactor, codec, newPod, newPodList, fixtures.PodReverseKeyFunc("/"+resource), etcdPathPrefix, "/"+resource+"/",
		schema.GroupResource{Resource: resource}, tr, etcd3.NewDefaultLeaseManagerConfig(),
		etcd3.NewDefaultDecoder(codec, versioner), versioner)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(raw.Close)
	return raw
}

func increaseRV(client *clientv3.Client) storagetesting.IncreaseRVFunc {
	return func(ctx context.Context, t *testing.T) int64 {
		resp, err := client.KV.Put(ctx, "increaseRV", "ok")
		if err != nil {
			t.Fatalf("increasing the RV: %v", err)
		}
		return resp.Header.Revision
	}
}

// compaction compacts etcd at rv and waits until the store has seen it, as
// the cache learns of compactions through the store.
func compaction(e *env) storagetesting.Compaction {
	// The version of etcd's compaction key this helper last wrote: etcd3.Compact
	// writes the key only if its version is still the one expected.
	var version int64
	return func(ctx context.Context, t *testing.T, resourceVersion string) {
		rv, err := storage.APIObjectVersioner{}.ParseResourceVersion(resourceVersion)
		if err != nil {
			t.Fatal(err)
		}
		// A lost compare-and-swap (an earlier compaction by this helper or
		// another) is no error: it returns the key's version, and the second
		// try with it compacts. Both tries also write the key, which moves
		// etcd's revision past every pod's, as the suite expects of a
		// compaction.
		var compacted int64
		version, _, compacted, err = etcd3.Compact(ctx, e.client.Client, version, int64(rv))
		if err == nil && compacted != int64(rv) {
			version, _, compacted, err = etcd3.Compact(ctx, e.client.Client, version, int64(rv))
		}
		if err != nil {
			t.Fatal(err)
		}
		if compacted != int64(rv) {
			t.Fatalf("compacted etcd at %d, want %d", compacted, rv)
		}
		if !e.storeSeesCompactions {
			// The etcd3 store tracks compactions only for list snapshots.
			return
		}
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return e.raw.CompactRevision() >= int64(rv), nil
		}); err != nil {
			t.Fatalf("store did not observe compaction at %d (has %d): %v", rv, e.raw.CompactRevision(), err)
		}
	}
}

// compactionAndTrim is compaction, then the cache's history cut at the
// compaction once the cache has applied it, for the conformance tests that
// want a 410 for a watch from before a compaction. The cache, like
// upstream's, serves such a watch from its history; upstream's run of the
// suite trims its buffer by hand the same way (compactWatch in its cacher
// tests).
func compactionAndTrim(e *env) storagetesting.Compaction {
	compact := compaction(e)
	return func(ctx context.Context, t *testing.T, resourceVersion string) {
		compact(ctx, t, resourceVersion)
		rv, err := storage.APIObjectVersioner{}.ParseResourceVersion(resourceVersion)
		if err != nil {
			t.Fatal(err)
		}
		// A list not older than rv returns once the cache has applied rv.
		if err := e.cacher.GetList(ctx, "/pods/", storage.ListOptions{
			ResourceVersion: resourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
			Recursive: true, Predicate: storage.Everything,
		}, &example.PodList{}); err != nil {
			t.Fatalf("cache did not reach rv %d: %v", rv, err)
		}
		e.cacher.DropHistoryThrough(rv)
	}
}

// createAndWait wraps Create so the object is in the cache before the test
// goes on, for tests that read back through the cache at once.
type createAndWait struct {
	storage.Interface
	c *cacher.Cacher
}

func (s createAndWait) Create(ctx context.Context, key string, obj, out runtime.Object, ttl uint64) error {
	if err := s.Interface.Create(ctx, key, obj, out, ttl); err != nil {
		return err
	}
	rv := out.(metav1.Object).GetResourceVersion()
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got := &example.Pod{}
		last = s.Interface.Get(ctx, key, storage.GetOptions{ResourceVersion: "0"}, got)
		return last == nil && got.ResourceVersion == rv, nil
	}); err != nil {
		return fmt.Errorf("object %s at RV %s never reached the cache (last read: %v): %w", key, rv, last, err)
	}
	return nil
}

// plainEvent unwraps the shared, encode-once objects a cache sends (both
// upstream's and watchkeeper's), as the conformance suite does, so a test
// can look at the typed object.
func plainEvent(ev watch.Event) watch.Event {
	if co, ok := ev.Object.(runtime.CacheableObject); ok {
		ev.Object = co.GetObject()
	}
	return ev
}

// withClock runs the cache on clk (the bookmark tick, freshness timeouts),
// for tests that step time by hand as upstream's WatchResync does.
func withClock(clk clock.WithTicker) setupOption {
	return func(c *cacher.Config) { c.Clock = clk }
}

// swappablePrefixTransformer is the etcd3 store's value transformer, which
// a test may swap while the store runs: the suite's prefix-transformer tests
// write data under one prefix and read or rewrite it under another.
type swappablePrefixTransformer struct {
	mu    sync.RWMutex
	inner value.Transformer
}

// basePrefix is the prefix the transformer starts from, upstream's in its
// cacher and etcd3 tests.
const basePrefix = "test!"

func newSwappablePrefixTransformer() *swappablePrefixTransformer {
	return &swappablePrefixTransformer{inner: storagetesting.NewPrefixTransformer([]byte(basePrefix), false)}
}

// current is the transformer in place. It is called outside the lock: the
// suite's reproducingTransformer writes from inside a read, and a swap
// waiting between the two would otherwise deadlock them.
func (s *swappablePrefixTransformer) current() value.Transformer {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.inner
}

func (s *swappablePrefixTransformer) TransformFromStorage(ctx context.Context, data []byte, dataCtx value.Context) ([]byte, bool, error) {
	return s.current().TransformFromStorage(ctx, data, dataCtx)
}

func (s *swappablePrefixTransformer) TransformToStorage(ctx context.Context, data []byte, dataCtx value.Context) ([]byte, error) {
	return s.current().TransformToStorage(ctx, data, dataCtx)
}

// cacherWithPrefixTransformer is our cache as the suite's
// InterfaceWithPrefixTransformer: reads and writes go through the cache,
// and UpdatePrefixTransformer swaps the transformer of the etcd3 store under
// it (the cache writes through to that store and learns of the writes from
// its watch, which the same transformer decodes).
type cacherWithPrefixTransformer struct {
	*cacher.Cacher
	transformer *swappablePrefixTransformer
}

var _ storagetesting.InterfaceWithPrefixTransformer = cacherWithPrefixTransformer{}

// UpdatePrefixTransformer gives modify a transformer of its own like the
// base one, which the suite's tests always change from (each reverts its
// change before the next), so modify may change it. Upstream's hands over
// a copy of the one in place; a copy would read the read counter that the
// store's watch updates meanwhile.
func (c cacherWithPrefixTransformer) UpdatePrefixTransformer(modify storagetesting.PrefixTransformerModifier) func() {
	next := modify(storagetesting.NewPrefixTransformer([]byte(basePrefix), false))
	c.transformer.mu.Lock()
	defer c.transformer.mu.Unlock()
	orig := c.transformer.inner
	c.transformer.inner = next
	return func() {
		c.transformer.mu.Lock()
		defer c.transformer.mu.Unlock()
		c.transformer.inner = orig
	}
}
