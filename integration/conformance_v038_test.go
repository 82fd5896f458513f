package integration

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/apitesting"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	examplev1 "k8s.io/apiserver/pkg/apis/example/v1"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage"
	storagetesting "k8s.io/apiserver/pkg/storage/testing"
	"k8s.io/apiserver/pkg/storage/testing/correctness"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/watchkeeper/watchkeeper/cacher"
	"github.com/watchkeeper/watchkeeper/internal/etcdtest"
	"github.com/watchkeeper/watchkeeper/internal/fixtures"
	"github.com/watchkeeper/watchkeeper/internal/testchild"
	"github.com/watchkeeper/watchkeeper/options"
)

// The conformance tests new in Kubernetes 1.38 (k8s.io/apiserver v0.38),
// and the older ones that need the etcd3 store's transformer swapped under
// the cache, driven as upstream's cacher_test.go drives them.
//
// Those that set feature gates run each in a child process of their own
// (testchild), so they can run beside the rest. Each runs at both values
// of ListFromCacheSnapshot: with it the cache keeps snapshots of its state,
// which every write the cache applies goes through, and lists at an exact
// RV come from them.

// isolatedWithGates runs body in a child process of its own (it sets
// feature gates), beside the other tests, at every combination of values
// of gates (withGates).
func isolatedWithGates(t *testing.T, gates []featuregate.Feature, body func(t *testing.T)) {
	t.Helper()
	t.Parallel()
	if !testchild.Isolate(t) {
		return
	}
	withGates(t, gates, body)
}

// withGates runs body once for each combination of values of gates, one
// level of subtests per gate ("ListFromCacheSnapshot=true/ConsistentGetFromCache=false").
func withGates(t *testing.T, gates []featuregate.Feature, body func(t *testing.T)) {
	t.Helper()
	if len(gates) == 0 {
		body(t)
		return
	}
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("%s=%v", gates[0], on), func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, gates[0], on)
			withGates(t, gates[1:], body)
		})
	}
}

func TestDeleteOnce(t *testing.T) {
	isolatedWithGates(t, []featuregate.Feature{features.ListFromCacheSnapshot}, func(t *testing.T) {
		storagetesting.RunTestDeleteOnce(context.Background(), t, setup(t).cacher, etcdPathPrefix, protoCodec)
	})
}

func TestUpdateOnce(t *testing.T) {
	isolatedWithGates(t, []featuregate.Feature{features.ListFromCacheSnapshot}, func(t *testing.T) {
		storagetesting.RunTestUpdateOnce(context.Background(), t, setup(t).cacher, etcdPathPrefix, protoCodec)
	})
}

// TestGuaranteedUpdate is upstream's pair of GuaranteedUpdate tests that
// swap the etcd3 store's transformer (the others are in
// conformance_test.go), at both values of ConsistentGetFromCache as
// upstream runs them: with the gate on, a write starts from the cache
// (write_from_cache.go); off, it writes through to the store with the
// cached object as the hint.
func TestGuaranteedUpdate(t *testing.T) {
	isolatedWithGates(t, []featuregate.Feature{features.ListFromCacheSnapshot, features.ConsistentGetFromCache}, func(t *testing.T) {
		t.Run("GuaranteedUpdate", func(t *testing.T) {
			tr := newSwappablePrefixTransformer()
			e := setupStore(t, protoCodec, tr)
			storagetesting.RunTestGuaranteedUpdate(context.Background(), t, cacherWithPrefixTransformer{e.cacher, tr},
				func(context.Context, *testing.T, string) {})
		})
		t.Run("GuaranteedUpdateChecksStoredData", func(t *testing.T) {
			tr := newSwappablePrefixTransformer()
			// The test stores an object with leading whitespace, which
			// only a JSON codec reads back (and a write would drop).
			e := setupStore(t, apitesting.TestCodec(fixtures.Codecs, examplev1.SchemeGroupVersion), tr)
			storagetesting.RunTestGuaranteedUpdateChecksStoredData(context.Background(), t, cacherWithPrefixTransformer{e.cacher, tr})
		})
	})
}

// TestListResourceVersionMatch lists, then lists again at the first list's
// RV exactly, while its transformer creates a pod on every read from etcd
// (the cache's own watch decodes each event through it too, so writes go on
// throughout): the lists at an exact RV must equal those they repeat.
// Upstream does not run it against its cacher yet (a TODO of #109831).
func TestListResourceVersionMatch(t *testing.T) {
	isolatedWithGates(t, []featuregate.Feature{features.ListFromCacheSnapshot}, func(t *testing.T) {
		tr := newSwappablePrefixTransformer()
		e := setupStore(t, protoCodec, tr)
		storagetesting.RunTestListResourceVersionMatch(context.Background(), t, cacherWithPrefixTransformer{e.cacher, tr})
	})
}

// TestOptimisticConcurrency pins how many etcd requests each Delete and
// GuaranteedUpdate costs through a cache (the suite's expectStatsCacher),
// at both values of ConsistentGetFromCache, as upstream runs it.
func TestOptimisticConcurrency(t *testing.T) {
	isolatedWithGates(t, []featuregate.Feature{features.ListFromCacheSnapshot, features.ConsistentGetFromCache}, func(t *testing.T) {
		tr := newSwappablePrefixTransformer()
		e := setupStore(t, protoCodec, tr)
		storagetesting.RunTestOptimisticConcurrency(context.Background(), t, cacherWithPrefixTransformer{e.cacher, tr}, true, e.recorder)
	})
}

// TestCorrectness checks every write, read and watch of a scripted history
// against the suite's model of storage.Interface, at both values of
// ConsistentGetFromCache, as upstream runs it.
//
// After each compaction it checks CompactRevision, which the etcd3 store
// only follows for compactions made by others while ListFromCacheSnapshot
// is on (upstream runs the test only so, like TestCompactRevision). So with
// the gate off the store is still built with it on (the store reads it once,
// as it starts): what runs without snapshots is our cache.
func TestCorrectness(t *testing.T) {
	isolatedWithGates(t, []featuregate.Feature{features.ListFromCacheSnapshot, features.ConsistentGetFromCache}, func(t *testing.T) {
		snapshots := utilfeature.DefaultFeatureGate.Enabled(features.ListFromCacheSnapshot)
		featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.ListFromCacheSnapshot, true)
		client := etcdtest.Start(t).KubernetesClient()
		raw := newPodStore(t, client, protoCodec, transformer, "pods")
		featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.ListFromCacheSnapshot, snapshots)
		e := startCache(t, client, raw)
		e.storeSeesCompactions = true
		keyFunc := podCacheConfig(e.raw).KeyFunc
		correctness.RunTestCorrectness(context.Background(), t, e.cacher, etcdPathPrefix, keyFunc, compaction(e))
	})
}

// TestWatchResync opens watches of every kind, then writes, compacts,
// stalls them and lets time pass, and checks each watch's events in order,
// as upstream's WatchResync subtest does: on a fake clock the test steps,
// with the trigger and indexes upstream's sets up.
//
// Its stalled watchers, never read while 25 events pass, must be closed
// part way (upstream's cache drops them; etcd would deliver everything).
// Our cache stalls such a watcher and delivers all 25 once it reads again
// (cacher/stall.go), and queues up to
// cacher.DefaultWatcherBuffer events for a client that is behind, so the
// test runs it as upstream's: stalling off and the buffer of upstream's
// watchers, 10 events.
func TestWatchResync(t *testing.T) {
	isolatedWithGates(t, []featuregate.Feature{features.ListFromCacheSnapshot}, func(t *testing.T) {
		clk := testingclock.NewFakeClock(time.Now())
		e := setup(t, withClock(clk), nodeNameIndex, withWatcherBuffer(upstreamWatcherBuffer), withoutStall)
		// Upstream's steps: past the time its cache gives a blocked
		// watcher (its dispatch budget), and past one bookmark period.
		resync := func() {
			time.Sleep(50 * time.Millisecond)
			clk.Step(100 * time.Millisecond)
			time.Sleep(50 * time.Millisecond)
			clk.Step(2 * time.Second)
			time.Sleep(50 * time.Millisecond)
		}
		triggerBookmarks := func() {
			time.Sleep(50 * time.Millisecond)
			clk.Step(options.DefaultBookmarkFrequency + time.Second)
			time.Sleep(50 * time.Millisecond)
		}
		store := &watchesFirst{Interface: createAndWait{e.cacher, e.cacher}}
		storagetesting.RunTestWatchResync(context.Background(), t, store, true, compactionAndTrim(e), resync, triggerBookmarks)
	})
}

// watchesFirst holds each Create while a Watch call is in progress, for
// up to a second. The suite opens its watches on goroutines and gives them
// 100ms before it writes what they must see, or not see, as events; a
// watch that reads etcd's revision first (sendInitialEvents with no RV) can
// take longer on a loaded machine, and would then start after the write.
// The bound is for a WatchList from an RV not written yet, which waits for
// the write itself.
type watchesFirst struct {
	storage.Interface
	opening atomic.Int64
}

func (s *watchesFirst) Watch(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	s.opening.Add(1)
	defer s.opening.Add(-1)
	return s.Interface.Watch(ctx, key, opts)
}

func (s *watchesFirst) Create(ctx context.Context, key string, obj, out runtime.Object, ttl uint64) error {
	// A timeout only ends the wait.
	_ = wait.PollUntilContextTimeout(ctx, time.Millisecond, time.Second, true, func(context.Context) (bool, error) {
		return s.opening.Load() == 0, nil
	})
	return s.Interface.Create(ctx, key, obj, out, ttl)
}

// upstreamWatcherBuffer is how many events upstream's cache holds for a
// watcher (its cacheWatcher's input channel) before it drops one that does
// not read.
const upstreamWatcherBuffer = 10

func withWatcherBuffer(n int) setupOption {
	return func(c *cacher.Config) { c.WatcherBuffer = n }
}

// withoutStall closes a slow watcher, as upstream's cache does
// (--watch-cache-stall-slow-watchers=false).
func withoutStall(c *cacher.Config) { c.StallSlowWatchers = false }
