package integration

import (
	"context"
	"fmt"
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
	raw := newPodStore(t, client, codec, tr, "pods")

	cfg := podCacheConfig(raw)
	for _, o := range opts {
		o(&cfg)
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

// newPodStore is the etcd3 store of pods under /registry/<resource>/, as
// the resource <resource>, over client. Several stores may share one client,
// as the caches of one server may.
func newPodStore(t *testing.T, client *kubernetes.Client, codec runtime.Codec, tr value.Transformer, resource string) storage.Interface {
	t.Helper()
	versioner := storage.APIObjectVersioner{}
	compactor := etcd3.NewCompactor(client.Client, 0, clock.RealClock{}, nil)
	t.Cleanup(compactor.Stop)
	raw, err := etcd3.New(client, compactor, codec, newPod, newPodList, fixtures.PodReverseKeyFunc("/"+resource), "/registry", "/"+resource+"/",
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
	return func(ctx context.Context, t *testing.T, resourceVersion string) {
		rv, err := storage.APIObjectVersioner{}.ParseResourceVersion(resourceVersion)
		if err != nil {
			t.Fatal(err)
		}
		var current int64
		current, _, _, err = etcd3.Compact(ctx, e.client.Client, current, int64(rv))
		if err != nil {
			_, _, _, err = etcd3.Compact(ctx, e.client.Client, current, int64(rv))
		}
		if err != nil {
			t.Fatal(err)
		}
		if !utilfeature.DefaultFeatureGate.Enabled(features.ListFromCacheSnapshot) {
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
