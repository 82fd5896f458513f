package cacher

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/watch"
)

// EndWatches ends every client watch after what is queued for it, and the
// cache keeps serving: new watches start and hear new events.
func TestEndWatchesDrainsAndKeepsTheCache(t *testing.T) {
	fs := newFakeStorage(100, newTestPod("a", 100, nil, ""))
	c := newTestCacher(t, fs, nil)
	c.waitReady(t)
	sw, _ := fs.waitWatch(t, 1)
	ws := []watch.Interface{
		c.startWatch(t, context.Background(), "100", everything(false)),
		c.startWatch(t, context.Background(), "100", everything(true)),
	}
	sw.send(t, watch.Modified, newTestPod("a", 101, map[string]string{"v": "1"}, ""))
	c.waitRV(t, 101)
	poll(t, "both watchers to have the event queued", func() bool {
		for _, w := range ws {
			if len(w.ResultChan()) == 0 {
				return false
			}
		}
		return true
	})
	if n := c.EndWatches(); n != 2 {
		t.Fatalf("EndWatches ended %d watches, want 2", n)
	}
	for i, w := range ws {
		got := drainUntilClosed(t, w)
		if len(got) != 1 || eventRV(t, got[0]) != 101 {
			t.Errorf("watch %d: %d events before the close, want the queued @101", i, len(got))
		}
	}
	if !c.Ready() {
		t.Fatal("not ready after EndWatches")
	}
	w := c.startWatch(t, context.Background(), "101", everything(false))
	sw.send(t, watch.Modified, newTestPod("a", 102, map[string]string{"v": "2"}, ""))
	if ev := nextEvent(t, w); eventRV(t, ev) != 102 {
		t.Fatalf("a watch after EndWatches: got %s, want @102", describe(ev))
	}
	if n := c.EndWatches(); n != 1 {
		t.Errorf("second EndWatches ended %d, want 1", n)
	}
}
