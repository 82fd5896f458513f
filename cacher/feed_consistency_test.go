package cacher

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	upstream "k8s.io/apiserver/pkg/storage/cacher/metrics"
	"k8s.io/component-base/metrics/testutil"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"
	"github.com/watchkeeper/watchkeeper/cacher/internal/feed"
)

// A cache that diverged from etcd (here: etcd's state at the cache's RV
// holds c where the cache holds b) is found out by the consistency check,
// counted as upstream counts it, and healed by a relist; a cache that
// agrees passes.
func TestConsistencyCheckDetectsAndHeals(t *testing.T) {
	gr := schema.GroupResource{Group: "consistency.test", Resource: "pods"}
	fs := cachertest.NewFakeStorage(100, cachertest.NewPod("a", 90, nil, ""), cachertest.NewPod("b", 100, nil, ""))
	c := newTestCacher(t, fs, func(cfg *Config) { cfg.GroupResource = gr })
	c.waitReady(t)
	fs.WaitWatch(t, 1)
	metric := func(status string) float64 {
		v, err := testutil.GetCounterMetricValue(upstream.StorageConsistencyCheckTotal.WithLabelValues(gr.Group, gr.Resource, status))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	ok0, failed0 := metric("success"), metric("failure")
	if err := c.feed.CheckConsistency(context.Background()); err != nil {
		t.Fatalf("check of a consistent cache: %v", err)
	}
	if got := metric("success") - ok0; got != 1 {
		t.Errorf("success checks +%v, want +1", got)
	}

	// etcd's state at 100 differs from the cache's: b is not there, c is.
	fs.SetList(100, cachertest.NewPod("a", 90, nil, ""), cachertest.NewPod("c", 100, nil, ""))
	if err := c.feed.CheckConsistency(context.Background()); !errors.Is(err, feed.ErrInconsistent) {
		t.Fatalf("check of a diverged cache: %v, want it inconsistent", err)
	}
	if got := metric("failure") - failed0; got != 1 {
		t.Errorf("failed checks +%v, want +1", got)
	}
	// Healed: the reflector relists (after its backoff on the fake clock).
	cachertest.Poll(t, "the reflector to back off before relisting", func() bool { return !c.Ready() && c.clk.Waiters() == cacheTimers+1 })
	c.clk.Step(time.Second)
	fs.WaitWatch(t, 2)
	c.waitReady(t)
	w := c.startWatch(t, context.Background(), "0", cachertest.Everything(false))
	var names []string
	for range 2 {
		ev := cachertest.NextEvent(t, w)
		m, _ := meta.Accessor(ev.Object)
		names = append(names, m.GetName())
		if ev.Type != watch.Added {
			t.Fatalf("after the relist: got %s, want ADDED", cachertest.Describe(ev))
		}
	}
	if names[0] != "a" || names[1] != "c" {
		t.Errorf("after the relist the cache holds %v, want [a c]", names)
	}
	if err := c.feed.CheckConsistency(context.Background()); err != nil {
		t.Errorf("check after the relist: %v", err)
	}
}

// The tick starts a check once the period (5m, jittered up to half again)
// has passed, and not before.
func TestConsistencyCheckRunsOnTheTick(t *testing.T) {
	gr := schema.GroupResource{Group: "consistency-tick.test", Resource: "pods"}
	fs := cachertest.NewFakeStorage(100, cachertest.NewPod("a", 100, nil, ""))
	c := newTestCacher(t, fs, func(cfg *Config) { cfg.GroupResource = gr })
	c.waitReady(t)
	// checks counts this test's checks: the counter is process-wide.
	count := func() float64 {
		v, _ := testutil.GetCounterMetricValue(upstream.StorageConsistencyCheckTotal.WithLabelValues(gr.Group, gr.Resource, "success"))
		return v
	}
	before := count()
	checks := func() float64 { return count() - before }
	c.stepTicks(t, 2, nil) // the first tick schedules the first check
	if n := checks(); n != 0 {
		t.Fatalf("%v checks within 2s, want 0", n)
	}
	// A tick just short of the period (the first check is due 5m to 7m30s
	// after the first tick, at 1s) starts none. The tick sets
	// checkingConsistency before the timer is re-armed, and a check counts
	// before it clears it: seeing neither, no check was started.
	c.waitWaiters(t, cacheTimers)
	c.clk.Step(feed.ConsistencyCheckPeriod - 2*time.Second)
	c.waitWaiters(t, cacheTimers)
	if c.feed.ConsistencyCheckRunning() || checks() != 0 {
		t.Fatalf("a check started %v after the first tick, before the period of %v", feed.ConsistencyCheckPeriod-time.Second, feed.ConsistencyCheckPeriod)
	}
	c.clk.Step(feed.ConsistencyCheckPeriod/2 + 2*time.Second) // 7m32s: past the latest due time
	cachertest.Poll(t, "a consistency check after the period", func() bool { return checks() == 1 })
}

// Each way a cache can differ from etcd is found on its own: an object
// etcd has and the cache lacks, one the cache has and etcd lacks, and one
// both have at different resourceVersions.
func TestConsistencyCheckFindsEachDivergence(t *testing.T) {
	for _, tc := range []struct {
		name string
		etcd []*example.Pod
	}{
		{"etcd has an object the cache lacks", []*example.Pod{cachertest.NewPod("a", 90, nil, ""), cachertest.NewPod("b", 100, nil, ""), cachertest.NewPod("c", 100, nil, "")}},
		{"the cache has an object etcd lacks", []*example.Pod{cachertest.NewPod("a", 90, nil, "")}},
		{"an object at another resourceVersion", []*example.Pod{cachertest.NewPod("a", 95, nil, ""), cachertest.NewPod("b", 100, nil, "")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := cachertest.NewFakeStorage(100, cachertest.NewPod("a", 90, nil, ""), cachertest.NewPod("b", 100, nil, ""))
			c := newTestCacher(t, fs, nil)
			c.waitReady(t)
			fs.WaitWatch(t, 1)
			fs.SetList(100, tc.etcd...)
			if err := c.feed.CheckConsistency(context.Background()); !errors.Is(err, feed.ErrInconsistent) {
				t.Errorf("check: %v, want it inconsistent", err)
			}
		})
	}
}

// With KUBE_WATCHCACHE_CONSISTENCY_CHECKER=true (upstream's switch for its
// CI), a divergence panics, naming the resource and the keys, instead of
// relisting unseen; a consistent cache does not.
func TestConsistencyCheckPanicsWhenAsked(t *testing.T) {
	gr := schema.GroupResource{Group: "consistency-panic.test", Resource: "pods"}
	fs := cachertest.NewFakeStorage(100, cachertest.NewPod("a", 90, nil, ""), cachertest.NewPod("b", 100, nil, ""))
	c := newTestCacher(t, fs, func(cfg *Config) { cfg.GroupResource = gr })
	c.waitReady(t)
	old := feed.PanicOnInconsistency
	feed.PanicOnInconsistency = func() bool { return true }
	t.Cleanup(func() { feed.PanicOnInconsistency = old })
	check := func() (panicked any) {
		defer func() { panicked = recover() }()
		_ = c.feed.CheckConsistency(context.Background())
		return nil
	}
	if p := check(); p != nil {
		t.Fatalf("a consistent cache panicked: %v", p)
	}
	fs.SetList(100, cachertest.NewPod("a", 90, nil, ""), cachertest.NewPod("c", 100, nil, ""))
	p := check()
	msg, _ := p.(string)
	if !strings.Contains(msg, "consistency-panic.test") || !strings.Contains(msg, "/c") {
		t.Fatalf("a diverged cache: panic %v, want one naming the resource and the keys", p)
	}
}
