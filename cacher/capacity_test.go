package cacher

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/component-base/metrics/testutil"
)

// A write storm larger than the capacity forces events younger than the
// window out: the metric counts each, and a watch from before them gets 410
// while one from inside what is kept loses nothing.
func TestHistoryCapacityUnderStorm(t *testing.T) {
	fs := newFakeStorage(100)
	c := newTestCacher(t, fs, func(cfg *Config) {
		cfg.EventsHistoryWindow = time.Hour
		cfg.HistoryCapacity = 3
	})
	c.waitReady(t)
	sw, _ := fs.waitWatch(t, 1)
	before, err := testutil.GetCounterMetricValue(c.metrics.historyForcedEvictions)
	if err != nil {
		t.Fatal(err)
	}
	for rv := uint64(101); rv <= 108; rv++ {
		sw.send(t, watch.Added, newTestPod(podName(int(rv)), rv, nil, ""))
	}
	c.waitRV(t, 108)

	after, err := testutil.GetCounterMetricValue(c.metrics.historyForcedEvictions)
	if err != nil {
		t.Fatal(err)
	}
	if got := after - before; got != 5 {
		t.Errorf("forced evictions counted %v, want 5 (8 events, capacity 3)", got)
	}
	c.state.mu.RLock()
	kept, start := c.state.history.len(), c.state.history.startRV
	c.state.mu.RUnlock()
	if kept != 3 || start != 105 {
		t.Errorf("history keeps %d events from %d, want 3 after 105", kept, start)
	}

	w := c.startWatch(t, context.Background(), "104", everything(false))
	if s := errorStatus(t, nextEvent(t, w)); s.Code != 410 || s.Reason != metav1.StatusReasonExpired {
		t.Errorf("watch from a forced-out RV: status %d %s, want 410 Expired", s.Code, s.Reason)
	}
	w = c.startWatch(t, context.Background(), "105", everything(false))
	for _, want := range []uint64{106, 107, 108} {
		if ev := nextEvent(t, w); eventRV(t, ev) != want {
			t.Fatalf("got %s, want @%d", describe(ev), want)
		}
	}
}
