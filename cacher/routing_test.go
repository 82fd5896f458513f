package cacher

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage"
	upstream "k8s.io/apiserver/pkg/storage/cacher/metrics"
	etcdfeature "k8s.io/apiserver/pkg/storage/feature"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachemetrics"
	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"
	"github.com/watchkeeper/watchkeeper/cacher/internal/feed"
)

// A later page asked for with RV "0" and a limit gets the rest of the list
// in one page, as upstream's cache answers it (computeListLimit ignores the
// limit whenever RV is "0"), whether the page comes from the snapshot at
// the token's RV or from the current state.
func TestContinueAtRVZeroIgnoresTheLimit(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.ListFromCacheSnapshot, true)
	withConsistentReads(t)
	var pods []*example.Pod
	for i := range 5 {
		pods = append(pods, cachertest.NewPod(cachertest.PodName(i), 100, nil, ""))
	}
	fs := cachertest.NewFakeStorage(100, pods...)
	c := newTestCacher(t, fs, nil)
	c.waitReady(t)
	ctx := context.Background()

	first := &example.PodList{}
	if err := c.GetList(ctx, "/pods/", storage.ListOptions{
		ResourceVersion: "0", Recursive: true, Predicate: withLimit(cachertest.Everything(false), 2),
	}, first); err != nil {
		t.Fatal(err)
	}
	if len(first.Items) != 5 || first.Continue != "" {
		t.Fatalf("first page at RV 0 with limit 2: %d items, continue %q; want all 5 and no token", len(first.Items), first.Continue)
	}

	for _, tc := range []struct {
		name string
		rv   int64 // the token's RV: the first page's, or negative for the current state
	}{
		{"token at the first page's RV", 100},
		{"token at the current state", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The token a first page ending at pod-01 hands out.
			token, err := storage.EncodeContinue("/pods/ns/"+cachertest.PodName(1)+"\x00", "/pods/", tc.rv)
			if err != nil {
				t.Fatal(err)
			}
			listsBefore := fs.ListCount()
			page := &example.PodList{}
			if err := c.GetList(ctx, "/pods/", storage.ListOptions{
				ResourceVersion: "0", Recursive: true, Predicate: withContinue(withLimit(cachertest.Everything(false), 2), token),
			}, page); err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, p := range page.Items {
				names = append(names, p.Name)
			}
			if len(names) != 3 || page.Continue != "" {
				t.Errorf("continue at RV 0 with limit 2: %v, continue %q; want the other 3 (%s, %s, %s) and no token",
					names, page.Continue, cachertest.PodName(2), cachertest.PodName(3), cachertest.PodName(4))
			}
			if n := fs.ListCount() - listsBefore; n != 0 {
				t.Errorf("%d lists went to etcd, want the cache to serve it", n)
			}
		})
	}
}

// withConsistentReads makes the storage layer's etcd feature check report
// progress requests supported for the test, as it does against a real etcd
// (delegator.ConsistentReadSupported): consistent reads are then the
// cache's to serve rather than etcd's. No test of this package runs in
// parallel, so swapping the process-wide checker is safe.
func withConsistentReads(t *testing.T) {
	saved := etcdfeature.DefaultFeatureSupportChecker
	etcdfeature.DefaultFeatureSupportChecker = progressSupported{saved}
	t.Cleanup(func() { etcdfeature.DefaultFeatureSupportChecker = saved })
}

type progressSupported struct {
	etcdfeature.FeatureSupportChecker
}

func (p progressSupported) Supports(f storage.Feature) bool {
	return f == storage.RequestWatchProgress || p.FeatureSupportChecker.Supports(f)
}

func withLimit(p storage.SelectionPredicate, limit int64) storage.SelectionPredicate {
	p.Limit = limit
	return p
}

func withContinue(p storage.SelectionPredicate, token string) storage.SelectionPredicate {
	p.Continue = token
	return p
}

// A consistent list the cache cannot catch up for within the freshness
// timeout falls back to etcd; with ConsistentListFromCacheSkipTimeoutFallback
// on, it is a 429 with Retry-After 1s and nothing goes to etcd, as upstream
// answers it. apiserver_watch_cache_consistent_read_total counts it with
// fallback="true" and "skipped".
func TestConsistentListTimeoutFallsBackUnlessTheGateSkipsIt(t *testing.T) {
	for _, skip := range []bool{false, true} {
		name := map[bool]string{false: "gate off: etcd", true: "gate on: 429"}[skip]
		t.Run(name, func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.ConsistentListFromCacheSkipTimeoutFallback, skip)
			withConsistentReads(t)
			fs := cachertest.NewFakeStorage(100, cachertest.NewPod("a", 100, nil, ""))
			c := newTestCacher(t, fs, nil)
			c.waitReady(t)
			fs.SetCurrentRV(200) // etcd moved on; the cache hears nothing of it
			fallback := map[bool]string{false: cachemetrics.FallbackYes, true: cachemetrics.FallbackSkipped}[skip]
			before := counter(t, upstream.ConsistentReadTotal.WithLabelValues("", "pods", "false", fallback))
			beforeOK := counter(t, upstream.ConsistentReadTotal.WithLabelValues("", "pods", "true", fallback))
			listsBefore := fs.ListCount()

			done := make(chan error, 1)
			go func() {
				done <- c.GetList(context.Background(), "/pods/", storage.ListOptions{
					ResourceVersion: "", Recursive: true, Predicate: cachertest.Everything(false),
				}, &example.PodList{})
			}()
			// The list waits: the tick, its freshness timer, the progress
			// requester's backoff.
			c.waitWaiters(t, cacheTimers+2)
			for step := time.Duration(0); step <= feed.FreshnessTimeout; step += 100 * time.Millisecond {
				c.clk.Step(100 * time.Millisecond)
				time.Sleep(time.Millisecond)
			}
			var err error
			select {
			case err = <-done:
			case <-time.After(cachertest.WaitFor):
				t.Fatalf("the consistent list did not return after the freshness timeout")
			}
			etcdLists := fs.ListCount() - listsBefore
			if !skip {
				if err != nil || etcdLists != 1 {
					t.Errorf("gate off: err %v and %d etcd lists, want the list served by etcd", err, etcdLists)
				}
				if got := counter(t, upstream.ConsistentReadTotal.WithLabelValues("", "pods", "true", fallback)) - beforeOK; got != 1 {
					t.Errorf("consistent_read_total{success=true,fallback=true} moved by %v, want 1", got)
				}
				return
			}
			if !apierrors.IsTooManyRequests(err) || etcdLists != 0 {
				t.Fatalf("gate on: err %v and %d etcd lists, want a 429 and none", err, etcdLists)
			}
			if s, ok := apierrors.SuggestsClientDelay(err); !ok || s != 1 {
				t.Errorf("gate on: Retry-After %d (%v), want 1s", s, ok)
			}
			if got := counter(t, upstream.ConsistentReadTotal.WithLabelValues("", "pods", "false", fallback)) - before; got != 1 {
				t.Errorf("consistent_read_total{success=false,fallback=skipped} moved by %v, want 1", got)
			}
		})
	}
}

// With the gate on, a consistent list whose etcd revision could not be read
// is answered with that error: no list goes to etcd (upstream answers the
// error whatever the gate).
func TestConsistentListWithoutEtcdRevisionSkipsTheFallbackWithTheGate(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.ConsistentListFromCacheSkipTimeoutFallback, true)
	withConsistentReads(t)
	fs := cachertest.NewFakeStorage(100, cachertest.NewPod("a", 100, nil, ""))
	c := newTestCacher(t, fs, nil)
	c.waitReady(t)
	fs.SetUnreachable(true)
	listsBefore := fs.ListCount()
	err := c.GetList(context.Background(), "/pods/", storage.ListOptions{
		ResourceVersion: "", Recursive: true, Predicate: cachertest.Everything(false),
	}, &example.PodList{})
	if err == nil || !storage.IsUnreachable(err) {
		t.Errorf("err %v, want etcd's unreachable error", err)
	}
	if n := fs.ListCount() - listsBefore; n != 0 {
		t.Errorf("%d lists went to etcd with the gate on, want none", n)
	}
}
