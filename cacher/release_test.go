package cacher

import (
	"context"
	"runtime"
	"testing"
	"time"
	"weak"
)

type payloadKey struct{}

// A watcher closed by its client stays filed on the bookmark calendar until
// its slot comes up (up to the 1m default frequency), but must let go of
// its request at once: the request's context, and all a real request
// hangs off it, must be collectable while the watcher waits in its slot.
func TestClosedWatcherLetsGoOfItsRequest(t *testing.T) {
	fs := newFakeStorage(100, newTestPod("a", 100, nil, ""))
	c := newTestCacher(t, fs, func(cfg *Config) { cfg.BookmarkFrequency = time.Minute })
	c.waitReady(t)
	fs.waitWatch(t, 1)

	ref, w := func() (weak.Pointer[[1 << 16]byte], interface{ Stop() }) {
		payload := new([1 << 16]byte)
		ctx, cancel := context.WithCancel(context.WithValue(context.Background(), payloadKey{}, payload))
		_ = cancel // the client ends the watch with Stop, not by cancelling
		w := c.startWatch(t, ctx, "0", everything(true))
		if ev := nextEvent(t, w); eventRV(t, ev) != 100 {
			t.Fatalf("got %s, want the initial a@100", describe(ev))
		}
		return weak.Make(payload), w
	}()
	w.Stop()
	c.state.mu.RLock()
	filed := c.hub.calendarLen()
	c.state.mu.RUnlock()
	if filed != 1 {
		t.Fatalf("%d watchers filed on the calendar, want the closed one still in its slot", filed)
	}
	for range 5 {
		runtime.GC()
		if ref.Value() == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the request's context is still reachable from a closed watcher waiting in its calendar slot")
}
