package cacher

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"
	upstream "k8s.io/apiserver/pkg/storage/cacher/metrics"
	compbasemetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/utils/ptr"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachemetrics"
	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"
	"github.com/watchkeeper/watchkeeper/cacher/internal/feed"
)

// The upstream series mean what upstream's mean, so kube-apiserver
// dashboards read true: events_dispatched_total once per event (it counted
// per watcher), init_events_total per initial event, cache_list_* per list
// served from the cache. (consistent_read_total needs etcd's consistent
// reads: the integration test over /metrics checks it.)
func TestUpstreamMetricsMeanWhatUpstreamsMean(t *testing.T) {
	gr := schema.GroupResource{Group: "metrics.test", Resource: "pods"}
	fs := cachertest.NewFakeStorage(100, cachertest.NewPod("a", 100, nil, ""), cachertest.NewPod("b", 100, nil, ""))
	c := newTestCacher(t, fs, func(cfg *Config) { cfg.GroupResource = gr })
	c.waitReady(t)
	sw, _ := fs.WaitWatch(t, 1)
	g, r := gr.Group, gr.Resource
	value := func(m compbasemetrics.CounterMetric) float64 {
		t.Helper()
		v, err := testutil.GetCounterMetricValue(m)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	dispatched := upstream.EventsCounter.WithLabelValues(g, r)
	initEvents := upstream.InitCounter.WithLabelValues(g, r)
	i0 := value(initEvents)

	var ws []watch.Interface
	for range 3 {
		ws = append(ws, c.startWatch(t, context.Background(), "0", cachertest.Everything(false))) // 2 initial ADDED each
	}
	if got := value(initEvents) - i0; got != 6 {
		t.Errorf("init_events_total +%v for 3 watches of 2 objects, want +6", got)
	}
	// One event delivered to all, then the count, so the list's progress
	// (dispatched too, as upstream counts) is behind us; then one more.
	sw.Send(t, watch.Modified, cachertest.NewPod("a", 101, map[string]string{"v": "1"}, ""))
	for _, w := range ws {
		for ev := cachertest.NextEvent(t, w); ev.Type == watch.Added; ev = cachertest.NextEvent(t, w) {
		}
	}
	d1 := value(dispatched)
	sw.Send(t, watch.Modified, cachertest.NewPod("a", 102, map[string]string{"v": "2"}, ""))
	for _, w := range ws {
		cachertest.NextEvent(t, w)
	}
	if got := value(dispatched) - d1; got != 1 {
		t.Errorf("events_dispatched_total +%v for one event to 3 watchers, want +1", got)
	}

	// A list served from the cache, with a selector that keeps one of the
	// two objects: upstream's fetched counts what the list looked at,
	// returned what it answered.
	series := map[string]string{"group": g, "resource": r}
	lists0 := gathered(t, "apiserver_cache_list_total", series)
	fetched0 := gathered(t, "apiserver_cache_list_fetched_objects_total", series)
	returned0 := gathered(t, "apiserver_cache_list_returned_objects_total", series)
	pred := cachertest.Everything(false)
	pred.Label = labels.SelectorFromSet(cachertest.MustParseSet("v=2"))
	list := &example.PodList{}
	if err := c.GetList(context.Background(), "/pods/", storage.ListOptions{ResourceVersion: "0", Recursive: true, Predicate: pred}, list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("list of v=2 returned %d objects, want 1", len(list.Items))
	}
	if got := gathered(t, "apiserver_cache_list_total", series) - lists0; got != 1 {
		t.Errorf("apiserver_cache_list_total +%v for a list served from the cache, want +1", got)
	}
	if got := gathered(t, "apiserver_cache_list_fetched_objects_total", series) - fetched0; got != 2 {
		t.Errorf("apiserver_cache_list_fetched_objects_total +%v for a list that looked at 2 objects, want +2", got)
	}
	if got := gathered(t, "apiserver_cache_list_returned_objects_total", series) - returned0; got != 1 {
		t.Errorf("apiserver_cache_list_returned_objects_total +%v for a list that returned 1 of 2, want +1", got)
	}
}

// gathered sums the series of name whose labels include want, from the
// registry the cache registers in.
func gathered(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue metric
				}
			}
			total += m.GetCounter().GetValue()
		}
	}
	return total
}

// Each initialization (the list that makes the cache's state) is timed in
// upstream's apiserver_watch_cache_initialization_duration_seconds, as
// upstream's cacher does: one observation per apiserver_watch_cache_
// initializations_total.
func TestInitializationDurationIsObserved(t *testing.T) {
	gr := schema.GroupResource{Group: "metrics.test", Resource: "initpods"}
	c := newTestCacher(t, cachertest.NewFakeStorage(100, cachertest.NewPod("a", 100, nil, "")), func(cfg *Config) { cfg.GroupResource = gr })
	c.waitReady(t)
	inits, err := testutil.GetCounterMetricValue(upstream.WatchCacheInitializations.WithLabelValues(gr.Group, gr.Resource))
	if err != nil {
		t.Fatal(err)
	}
	timed, err := testutil.GetHistogramMetricCount(upstream.WatchCacheInitializationDuration.WithLabelValues(gr.Group, gr.Resource))
	if err != nil {
		t.Fatal(err)
	}
	if inits != 1 || timed != 1 {
		t.Errorf("after one initialization: initializations_total %v, initialization_duration_seconds count %d; want 1 and 1", inits, timed)
	}
}

// notReadyCount is not_ready_total of c's resource for why.
func notReadyCount(t *testing.T, c *testCacher, why string) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(c.metrics.NotReady[why])
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Each transition from ready to not ready is counted once, with the path
// that took the cache out of service: a relist (once, however many of its
// lists fail), a storage watch called silent (again after the watch
// answered), a storage watch failing past the retry window, a Stop.
// Staying not ready is not a transition.
func TestNotReadyTransitionsAreCountedByReason(t *testing.T) {
	noLeader := &apierrors.NewInternalError(fmt.Errorf("etcdserver: no leader")).ErrStatus
	for _, tc := range []struct {
		why string
		// leave takes the ready cache out of service once and makes it
		// ready again; it returns the number of transitions it caused.
		leave func(t *testing.T, c *testCacher, fs *cachertest.FakeStorage) int
	}{
		{cachemetrics.NotReadyRelist, func(t *testing.T, c *testCacher, fs *cachertest.FakeStorage) int {
			sw, _ := fs.WaitWatch(t, 1)
			fs.SetList(300)
			fs.FailLists(1)
			sw.SendError(t, &apierrors.NewResourceExpired("compacted").ErrStatus)
			cachertest.Poll(t, "the reflector to back off", func() bool { return !c.Ready() && c.clk.Waiters() == cacheTimers+1 })
			c.clk.Step(time.Second)
			// The failed relist puts the cache not ready again: still one
			// transition.
			cachertest.Poll(t, "the relist to fail and back off", func() bool { return fs.ListCount() == 2 && c.clk.Waiters() == cacheTimers+1 })
			c.clk.Step(time.Second)
			c.waitReady(t)
			return 1
		}},
		{cachemetrics.NotReadyStorageSilent, func(t *testing.T, c *testCacher, fs *cachertest.FakeStorage) int {
			for i := range 2 {
				fs.WaitWatch(t, i+1)
				// What the liveness check does at the timeout.
				c.feed.EndWatchAsSilent(time.Second)
				cachertest.Poll(t, "the cache to go not ready", func() bool { return !c.Ready() })
				next, _ := fs.WaitWatch(t, i+2)
				next.SendBookmark(t, 100)
				c.waitReady(t)
			}
			return 2
		}},
		{cachemetrics.NotReadyStorageFailing, func(t *testing.T, c *testCacher, fs *cachertest.FakeStorage) int {
			// Transient failures, every 3s (the longest jittered backoff
			// is 2s * 1.5), until they outlast the retry window.
			n := 1
			sw, _ := fs.WaitWatch(t, n)
			sw.SendError(t, noLeader)
			for elapsed := time.Duration(0); c.Ready(); elapsed += 3 * time.Second {
				if elapsed > 2*feed.StorageWatchRetryWindow {
					t.Fatalf("still ready after failures for %v", elapsed)
				}
				n++
				sw, _ = fs.WaitWatch(t, n)
				sw.SendError(t, noLeader)
				c.waitWaiters(t, cacheTimers+1)
				c.clk.Step(3 * time.Second)
			}
			sw, _ = fs.WaitWatch(t, n+1)
			sw.SendBookmark(t, 100)
			c.waitReady(t)
			return 1
		}},
		{cachemetrics.NotReadyStopped, func(t *testing.T, c *testCacher, fs *cachertest.FakeStorage) int {
			c.Stop()
			return 1
		}},
	} {
		t.Run(tc.why, func(t *testing.T) {
			fs := cachertest.NewFakeStorage(100, cachertest.NewPod("a", 100, nil, ""))
			c := newTestCacher(t, fs, func(cfg *Config) {
				cfg.GroupResource = schema.GroupResource{Group: "notready.test", Resource: tc.why}
			})
			// The series outlive the cache (the registry is the
			// process's): counts are differences.
			reasons := cachemetrics.NotReadyReasons
			before := map[string]float64{}
			for _, why := range reasons {
				before[why] = notReadyCount(t, c, why)
			}
			registered := gathered(t, "watchkeeper_watch_cache_not_ready_total", map[string]string{"resource": tc.why, "reason": tc.why})
			c.waitReady(t)
			for _, why := range reasons {
				if got := notReadyCount(t, c, why) - before[why]; got != 0 {
					t.Fatalf("not_ready_total{reason=%s} +%v at the first list, want 0 (pending to ready is no transition)", why, got)
				}
			}
			want := tc.leave(t, c, fs)
			for _, why := range reasons {
				w := 0
				if why == tc.why {
					w = want
				}
				if got := notReadyCount(t, c, why) - before[why]; got != float64(w) {
					t.Errorf("not_ready_total{reason=%s} +%v, want +%d", why, got, w)
				}
			}
			if got := gathered(t, "watchkeeper_watch_cache_not_ready_total", map[string]string{"resource": tc.why, "reason": tc.why}) - registered; got != float64(want) {
				t.Errorf("the registry's not_ready_total{resource=%s} +%v, want +%d", tc.why, got, want)
			}
		})
	}
}

// Every Get and list the cache sends on to etcd is counted, by why: a Get
// at RV "" (consistent), any read while not ready, a list the delegator
// gives away, a consistent list whose catch-up failed. What the cache
// serves is not counted.
func TestReadsToStorageAreCountedByReason(t *testing.T) {
	gr := schema.GroupResource{Group: "reads.test", Resource: "pods"}
	fs := cachertest.NewFakeStorage(100, cachertest.NewPod("a", 100, nil, ""))
	c := newTestCacher(t, fs, func(cfg *Config) { cfg.GroupResource = gr })
	c.waitReady(t)
	sw, _ := fs.WaitWatch(t, 1)
	ctx := context.Background()
	value := func(r cachemetrics.StorageRead) float64 {
		t.Helper()
		v, err := testutil.GetCounterMetricValue(c.metrics.ReadsToStorage[r])
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// The series outlive the cache (the registry is the process's):
	// counts are differences.
	before := map[cachemetrics.StorageRead]float64{}
	for _, r := range cachemetrics.StorageReads {
		before[r] = value(r)
	}
	registered := gathered(t, "watchkeeper_watch_cache_reads_to_storage_total", map[string]string{"group": gr.Group, "verb": "get", "reason": "not_ready"})
	counts := func() map[cachemetrics.StorageRead]float64 {
		t.Helper()
		out := map[cachemetrics.StorageRead]float64{}
		for _, r := range cachemetrics.StorageReads {
			if v := value(r) - before[r]; v != 0 {
				out[r] = v
			}
		}
		return out
	}
	expect := func(when string, want map[cachemetrics.StorageRead]float64) {
		t.Helper()
		if got := counts(); !maps.Equal(got, want) {
			t.Errorf("%s: reads_to_storage_total %v, want %v", when, got, want)
		}
	}
	list := func(rv string, pred storage.SelectionPredicate) error {
		return c.GetList(ctx, "/pods/", storage.ListOptions{ResourceVersion: rv, Recursive: true, Predicate: pred}, &example.PodList{})
	}

	// Served by the cache: nothing counted. (The fake storage answers no
	// Get: a Get it had would fail.)
	if err := c.Get(ctx, "/pods/ns/a", storage.GetOptions{ResourceVersion: "0"}, &example.Pod{}); err != nil {
		t.Fatalf("Get at RV 0 from the ready cache: %v", err)
	}
	if err := list("0", cachertest.Everything(false)); err != nil {
		t.Fatal(err)
	}
	expect("reads the cache served", map[cachemetrics.StorageRead]float64{})

	// A Get at RV "" is etcd's; so is a consistent list where etcd's
	// progress requests are not supported (the delegator's decision).
	_ = c.Get(ctx, "/pods/ns/a", storage.GetOptions{ResourceVersion: ""}, &example.Pod{})
	if err := list("", cachertest.Everything(false)); err != nil {
		t.Fatal(err)
	}
	expect("consistent reads", map[cachemetrics.StorageRead]float64{cachemetrics.GetConsistent: 1, cachemetrics.ListDelegated: 1})

	// With progress requests supported the consistent list is the
	// cache's, unless etcd's revision cannot be read: then it falls back.
	withConsistentReads(t)
	fs.SetUnreachable(true)
	if err := list("", cachertest.Everything(false)); err != nil {
		t.Fatal(err)
	}
	fs.SetUnreachable(false)
	expect("a consistent list whose catch-up failed", map[cachemetrics.StorageRead]float64{cachemetrics.GetConsistent: 1, cachemetrics.ListDelegated: 1, cachemetrics.ListConsistentFallback: 1})

	// Not ready (relisting, the relist failing): a Get at RV 0 and a
	// paginated list without selectors go to etcd; an unpaginated list is
	// a 429, nothing sent.
	fs.FailLists(1)
	sw.SendError(t, &apierrors.NewResourceExpired("compacted").ErrStatus)
	cachertest.Poll(t, "the reflector to back off", func() bool { return !c.Ready() && c.clk.Waiters() == cacheTimers+1 })
	c.clk.Step(time.Second)
	cachertest.Poll(t, "the relist to fail and back off", func() bool { return fs.ListCount() == 4 && c.clk.Waiters() == cacheTimers+1 })
	_ = c.Get(ctx, "/pods/ns/a", storage.GetOptions{ResourceVersion: "0"}, &example.Pod{})
	if err := list("0", withLimit(cachertest.Everything(false), 10)); err != nil {
		t.Fatal(err)
	}
	if err := list("0", cachertest.Everything(false)); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("an unpaginated list while not ready: %v, want 429", err)
	}
	expect("reads while not ready", map[cachemetrics.StorageRead]float64{cachemetrics.GetConsistent: 1, cachemetrics.ListDelegated: 1, cachemetrics.ListConsistentFallback: 1, cachemetrics.GetNotReady: 1, cachemetrics.ListNotReady: 1})
	if got := gathered(t, "watchkeeper_watch_cache_reads_to_storage_total", map[string]string{"group": gr.Group, "verb": "get", "reason": "not_ready"}) - registered; got != 1 {
		t.Errorf("the registry's reads_to_storage_total{verb=get,reason=not_ready} +%v, want +1", got)
	}
}

// etcd's answer to a progress request is timed from the oldest request it
// has not answered: one that went unanswered and was sent again counts
// from the first. A progress notification nobody asked for (etcd's own
// periodic ones) is not an answer.
func TestProgressAnswerIsTimedFromTheOldestRequest(t *testing.T) {
	gr := schema.GroupResource{Group: "metrics.test", Resource: "progresspods"}
	fs := cachertest.NewFakeStorage(100)
	c := newTestCacher(t, fs, func(cfg *Config) { cfg.GroupResource = gr })
	c.waitReady(t)
	sw, _ := fs.WaitWatch(t, 1)
	counts := func() (requests float64, answers uint64, sum float64) {
		t.Helper()
		requests, err := testutil.GetCounterMetricValue(c.metrics.ProgressRequests)
		if err != nil {
			t.Fatal(err)
		}
		if answers, err = testutil.GetHistogramMetricCount(c.metrics.ProgressAnswer); err != nil {
			t.Fatal(err)
		}
		if sum, err = testutil.GetHistogramMetricValue(c.metrics.ProgressAnswer); err != nil {
			t.Fatal(err)
		}
		return requests, answers, sum
	}

	sw.SendBookmark(t, 100)
	cachertest.Poll(t, "the unasked-for notification to be applied", func() bool {
		return gathered(t, "watchkeeper_watch_cache_storage_bookmarks_total", map[string]string{"resource": gr.Resource}) == 1
	})
	if _, answers, _ := counts(); answers != 0 {
		t.Fatalf("a notification nobody asked for was timed as an answer (%d answers)", answers)
	}

	done := watchAsync(c, "/pods/", storage.ListOptions{ResourceVersion: "200", Recursive: true,
		Predicate: cachertest.Everything(true), SendInitialEvents: ptr.To(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	cachertest.Poll(t, "the first progress request", func() bool { return fs.ProgressCount() == 1 && c.clk.Waiters() == cacheTimers+2 })
	c.clk.Step(feed.ProgressRequestPeriod)
	cachertest.Poll(t, "the request sent again", func() bool { return fs.ProgressCount() == 2 && c.clk.Waiters() == cacheTimers+2 })
	c.clk.Step(50 * time.Millisecond)
	sw.SendBookmark(t, 200)
	r := <-done
	if r.err != nil {
		t.Fatalf("Watch: %v", r.err)
	}
	r.w.Stop()
	requests, answers, sum := counts()
	if requests != 2 || answers != 1 {
		t.Fatalf("progress_requests_total %v, answers timed %d; want 2 and 1", requests, answers)
	}
	if want := (feed.ProgressRequestPeriod + 50*time.Millisecond).Seconds(); sum != want {
		t.Errorf("the answer took %vs, want %vs: from the first request, not the one sent again", sum, want)
	}
}
