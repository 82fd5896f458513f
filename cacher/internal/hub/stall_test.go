package hub

import (
	"testing"
	"time"

	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/watchkeeper/watchkeeper/bookmarks"
	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"
	"github.com/watchkeeper/watchkeeper/watchlist"
)

// A watcher that stalls with a full queue keeps only the event its pump is
// handing over, in arrays of its own size: the rest of what it had queued
// is the history's, and the arrays a burst grew are let go.
func TestStallKeepsOnlyTheEventThePumpHandsOver(t *testing.T) {
	const buffer = 200
	w, wg, stop := newLoneWatcher(buffer)
	now := cachertest.Epoch.UnixNano()
	for i := range ResultBuffer + buffer {
		w.mu.Lock()
		ok, _ := w.deliverLocked(podEvent(i), uint64(100+i), now)
		w.mu.Unlock()
		if !ok {
			t.Fatalf("event #%d refused within the buffer", i)
		}
	}
	kept, ok := w.Stall(now)
	if !ok {
		t.Fatal("Stall refused an open watcher")
	}
	w.mu.Lock()
	n, liveCap, queueCap, state := w.queuedLocked(), cap(w.live), cap(w.queue), w.state
	w.mu.Unlock()
	if kept != 1 || n > 1 || liveCap > 1 || queueCap > 1 || state != watcherStalled {
		t.Errorf("stalled: kept %d, %d queued, capacities queue %d live %d, state %d; want the one event, in arrays of one, stalled",
			kept, n, queueCap, liveCap, state)
	}
	close(stop)
	wg.Wait()
}

// A WatchList watcher still waiting for its end bookmark when it returns
// (its floor above the state it started from) gets it behind its catch-up
// once the state's RV is at the floor, as a new watcher gets its own; below
// the floor it waits on, for the tick.
func TestRejoinEndsTheInitialEventsAtTheFloor(t *testing.T) {
	for _, tc := range []struct {
		rv       uint64
		wantEnd  bool
		wantNext watchlist.State
	}{
		{rv: 104, wantEnd: false, wantNext: watchlist.WaitingForBookmark},
		{rv: 105, wantEnd: true, wantNext: watchlist.BookmarkReceived},
	} {
		w, wg, stop := newLoneWatcher(4)
		w.Env.Bookmark = func(rv uint64) (kruntime.Object, error) { return cachertest.NewPod("", rv, nil, ""), nil }
		w.Tracker = watchlist.NewTracker(105)
		w.state = watcherStalled
		var chunk Chunk
		chunk.Add(podEvent(1), 101)
		if !w.Rejoin(chunk, tc.rv, cachertest.Epoch.UnixNano()) {
			t.Fatal("Rejoin refused a stalled watcher")
		}
		if got := cachertest.ReceivedAll(w); len(got) != 0 {
			t.Fatalf("delivered %v before a pump ran", got)
		}
		w.mu.Lock()
		n, state, next, startRV := w.queuedLocked(), w.state, w.Tracker.State(), w.StartRV
		var last watch.Event
		if n > 0 {
			last = w.queue[len(w.queue)-1]
		}
		w.mu.Unlock()
		if state != watcherOpen || startRV != tc.rv || next != tc.wantNext {
			t.Errorf("at %d: state %d, StartRV %d, WatchList %v; want open, %d, %v", tc.rv, state, startRV, next, tc.rv, tc.wantNext)
		}
		marked, _ := storage.HasInitialEventsEndBookmarkAnnotation(last.Object)
		if gotEnd := n == 2 && last.Type == watch.Bookmark && marked; gotEnd != tc.wantEnd {
			t.Errorf("at %d: %d queued, the last %s; want the end bookmark behind the chunk: %v", tc.rv, n, cachertest.Describe(last), tc.wantEnd)
		}
		close(stop)
		wg.Wait()
	}
}

// A watcher stalled across its bookmark slot keeps exactly one calendar
// entry: the tick offers it nothing while it is stalled but files it
// again, and Resume files nothing, so it is neither lost from the calendar
// (no bookmark ever again) nor on it twice (two bookmarks a period).
func TestStalledWatcherKeepsOneCalendarEntry(t *testing.T) {
	clk := testingclock.NewFakeClock(cachertest.Epoch)
	h := New(bookmarks.Policy{Frequency: 10 * time.Second, PreDeadlineOffset: time.Second}, time.Second, clk)
	w, wg, stop := newLoneWatcher(4)
	defer func() { close(stop); wg.Wait() }()
	w.Bookmarks, w.Deadline = true, cachertest.Epoch.Add(time.Hour)
	offered := 0
	tick := func() {
		due := h.PopDue(nil)
		h.Offer(due, func(*Watcher) bool { offered++; return true })
		h.Refile(due, clk.Now())
	}
	h.Add(w, "sig", clk.Now())
	if !h.Stall(w) {
		t.Fatal("Stall refused a registered watcher")
	}
	clk.Step(11 * time.Second)
	tick()
	if offered != 0 || h.CalendarLen() != 1 {
		t.Fatalf("while stalled: %d bookmarks offered, %d calendar entries; want 0 and 1", offered, h.CalendarLen())
	}
	if !h.Resume(w) || h.CalendarLen() != 1 {
		t.Fatalf("after Resume: %d calendar entries, want 1", h.CalendarLen())
	}
	clk.Step(11 * time.Second)
	tick()
	if offered != 1 || h.CalendarLen() != 1 {
		t.Fatalf("after its next slot: %d bookmarks offered, %d calendar entries; want 1 and 1", offered, h.CalendarLen())
	}
}
