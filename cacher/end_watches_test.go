package cacher

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/watch"
)

// EndWatches ends every client watch after what is queued for it, and the
// cache keeps serving: new watches start and hear new events.
func TestEndWatchesDrainsAndKeepsTheCache(t *testing.T) {
	fs := newFakeStorage(100, newTestPod("a", 100, nil, ""))
	c := newTestCacher(t, fs, nil)
	c.waitReady(t)
	sw, _ := fs.waitWatch(t, 1)
	ws := []*watcher{
		c.startWatch(t, context.Background(), "100", everything(false)).(*watcher),
		c.startWatch(t, context.Background(), "100", everything(true)).(*watcher),
	}
	// More events than the client's channel holds: the rest wait in the
	// watcher's queue, behind a client that reads nothing yet. Those, not
	// only what sits in the channel, must reach the client before the close.
	const events = resultBuffer + 5
	for i := 1; i <= events; i++ {
		sw.send(t, watch.Modified, newTestPod("a", uint64(100+i), map[string]string{"v": fmt.Sprint(i)}, ""))
	}
	poll(t, "both watchers to have a full channel and the rest queued", func() bool {
		for _, w := range ws {
			w.mu.Lock()
			inChan, queued := len(w.result), w.queuedLocked()
			w.mu.Unlock()
			if inChan != resultBuffer || queued != events-resultBuffer {
				return false
			}
		}
		return true
	})
	if n := c.EndWatches(); n != 2 {
		t.Fatalf("EndWatches ended %d watches, want 2", n)
	}
	for i, w := range ws {
		var rvs []uint64
		for _, ev := range drainUntilClosed(t, w) {
			rvs = append(rvs, eventRV(t, ev))
		}
		if diff := cmp.Diff(seq(101, 100+events), rvs); diff != "" {
			t.Errorf("watch %d: events before the close (-want +got):\n%s", i, diff)
		}
	}
	if !c.Ready() {
		t.Fatal("not ready after EndWatches")
	}
	w := c.startWatch(t, context.Background(), fmt.Sprint(100+events), everything(false))
	sw.send(t, watch.Modified, newTestPod("a", 200, map[string]string{"v": "last"}, ""))
	if ev := nextEvent(t, w); eventRV(t, ev) != 200 {
		t.Fatalf("a watch after EndWatches: got %s, want @200", describe(ev))
	}
	if n := c.EndWatches(); n != 1 {
		t.Errorf("second EndWatches ended %d, want 1", n)
	}
}
