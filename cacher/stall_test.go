package cacher

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachemetrics"
	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"
	"github.com/watchkeeper/watchkeeper/cacher/internal/hub"
	"github.com/watchkeeper/watchkeeper/internal/watchorder"
	"github.com/watchkeeper/watchkeeper/watchlist"
)

// Stall and resume (stall.go). Each test here fails with stalling off
// (Config.StallSlowWatchers false, the cache before it): the slow watcher
// is closed instead.

// slowCount reads slow_watchers_total for outcome. The series are the
// process's (every test cacher is "pods"): tests compare before and after.
func slowCount(t *testing.T, c *testCacher, outcome string) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(c.metrics.SlowWatchers[outcome])
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// isStalled is whether w is stalled: out of the fan-out, among the hub's
// stalled watchers.
func isStalled(c *testCacher, w *hub.Watcher) bool {
	return w.Stalled() && !c.hub.Has(w) && c.hub.IsStalled(w)
}

// queued is what w holds queued, and whether it is stalled.
func queued(w *hub.Watcher) (int, bool) {
	_, n := w.Pending()
	return n, w.Stalled()
}

// stallWith sends events rv from+1.. (pod names cycling over ten pods)
// until w stalls, and returns the last RV sent.
func stallWith(t *testing.T, c *testCacher, sw *cachertest.FakeWatch, w *hub.Watcher, from uint64) uint64 {
	t.Helper()
	rv := from
	for !isStalled(c, w) {
		rv++
		if rv > from+uint64(hub.ResultBuffer+c.cfg.WatcherBuffer+5) {
			t.Fatalf("not stalled after %d events", rv-from)
		}
		sw.Send(t, watch.Modified, cachertest.NewPod(cachertest.PodName(int(rv%10)), rv, nil, ""))
		c.waitRV(t, rv)
		// The dispatcher has the event once the cache applied it; wait for
		// it to have handed it out (or stalled the watcher).
		cachertest.Poll(t, "the dispatcher to hand out the event", func() bool {
			inChan, n := w.Pending()
			return w.Stalled() || n > 0 || inChan > 0
		})
	}
	return rv
}

// readInOrder reads w until it has had every event at RV from+1 through
// to, each once and in order, bookmarks never behind the last event nor
// ahead of one to come (watchorder), and returns how many bookmarks came
// between them. check, if set, runs after each read.
func readInOrder(t *testing.T, w watch.Interface, from, to uint64, check func()) (bookmarks int) {
	t.Helper()
	r := watchorder.New(from, cachertest.Seq(from+1, to))
	for !r.Done() {
		ev := cachertest.NextEvent(t, w)
		var rv uint64
		if ev.Type != watch.Error {
			rv = cachertest.EventRV(t, ev)
		}
		if err := r.Take(ev.Type, rv); err != nil {
			t.Fatalf("got %s: %v", cachertest.Describe(ev), err)
		}
		if check != nil {
			check()
		}
	}
	return r.Bookmarks
}

// A client that stops reading while many times its queue bound of events
// are written, and bookmark ticks pass, gets every event in order, none
// twice, once it reads again, and stays open: bookmarks resume after its
// events. Meanwhile the fast watcher gets each event before the next is
// written (the dispatcher never waits for the slow one, which holds only
// its position and the one event its pump hands over), and the catch-up
// comes in chunks of at most catchUpChunk.
func TestStalledWatcherGetsEveryEventInOrderOnceItReadsAgain(t *testing.T) {
	const (
		buffer = 4
		total  = 300 // 75 times the queue bound
	)
	fs := cachertest.NewFakeStorage(100)
	c := newTestCacher(t, fs, func(cfg *Config) {
		cfg.WatcherBuffer = buffer
		cfg.BookmarkFrequency = 2 * time.Second
		cfg.BookmarkPreDeadlineOffset = time.Second
	})
	c.waitReady(t)
	sw, _ := fs.WaitWatch(t, 1)
	fast := c.startWatch(t, context.Background(), "100", cachertest.Everything(false))
	slow := c.startWatch(t, context.Background(), "100", cachertest.Everything(true)).(*hub.Watcher)
	terminatedBefore := terminated(t, c)
	stalledBefore, resumedBefore := slowCount(t, c, cachemetrics.SlowStalled), slowCount(t, c, cachemetrics.SlowResumed)

	for i := 1; i <= total; i++ {
		rv := uint64(100 + i)
		sw.Send(t, watch.Modified, cachertest.NewPod(cachertest.PodName(i%10), rv, nil, ""))
		if ev := cachertest.NextEvent(t, fast); cachertest.EventRV(t, ev) != rv {
			t.Fatalf("the fast watcher got %s, want @%d", cachertest.Describe(ev), rv)
		}
		if i%50 == 0 {
			// Bookmark ticks while it is stalled: none reaches it.
			c.stepTicks(t, 3, nil)
		}
	}
	if !isStalled(c, slow) {
		t.Fatalf("the slow watcher is not stalled after %d events with a queue bound of %d", total, buffer)
	}
	if held, stalled := queued(slow); held > 1 || !stalled {
		t.Errorf("the stalled watcher holds %d events queued (stalled: %v); want at most the one its pump hands over", held, stalled)
	}
	if got := slowCount(t, c, cachemetrics.SlowStalled) - stalledBefore; got != 1 {
		t.Errorf("stalls counted %v, want 1", got)
	}

	chunk := hub.CatchUpChunk(buffer)
	bookmarks := readInOrder(t, slow, 100, 100+total, func() {
		if n, stalled := queued(slow); stalled && n > chunk {
			t.Fatalf("a stalled watcher holds %d events queued, more than a chunk (%d)", n, chunk)
		}
	})
	if bookmarks > 0 {
		t.Errorf("%d bookmarks reached the watcher while it was stalled", bookmarks)
	}
	cachertest.Poll(t, "the caught-up watcher to be registered again", func() bool { return c.hub.Has(slow) })
	if got := terminated(t, c) - terminatedBefore; got != 0 {
		t.Errorf("terminated watchers = %v, want 0", got)
	}
	if got := slowCount(t, c, cachemetrics.SlowResumed) - resumedBefore; got < 1 {
		t.Errorf("resumes counted %v, want at least 1", got)
	}

	// Live again: the next event comes from the dispatcher, and a bookmark
	// after it carries its RV.
	next := uint64(101 + total)
	sw.Send(t, watch.Modified, cachertest.NewPod("after", next, nil, ""))
	if ev := cachertest.NextEvent(t, slow); ev.Type != watch.Added || cachertest.EventRV(t, ev) != next {
		t.Fatalf("after its catch-up got %s, want ADDED after@%d", cachertest.Describe(ev), next)
	}
	c.stepTicks(t, 3, nil)
	if ev := cachertest.NextEvent(t, slow); ev.Type != watch.Bookmark || cachertest.EventRV(t, ev) != next {
		t.Fatalf("got %s, want a bookmark @%d", cachertest.Describe(ev), next)
	}
}

// A stalled watcher whose position the history no longer holds gets, once
// its client reads again, what was kept for it, then the 410 a watch from
// its position would get, and is closed: counted in upstream's terminated
// watchers and in ours by reason, and logged with the reason.
func TestStalledWatcherWhosePositionLeftTheHistoryGets410(t *testing.T) {
	logger := ktesting.NewLogger(ktesting.NopTL{}, ktesting.NewConfig(ktesting.BufferLogs(true)))
	klog.SetLogger(logger)
	t.Cleanup(klog.ClearLogger) // after the cacher's Stop
	fs := cachertest.NewFakeStorage(100)
	c := newTestCacher(t, fs, func(cfg *Config) { cfg.WatcherBuffer = 2 })
	c.waitReady(t)
	sw, _ := fs.WaitWatch(t, 1)
	w := c.startWatch(t, context.Background(), "100", cachertest.Everything(false)).(*hub.Watcher)
	terminatedBefore, expiredBefore := terminated(t, c), slowCount(t, c, cachemetrics.SlowPositionExpired)
	last := stallWith(t, c, sw, w, 100)
	for rv := last + 1; rv <= last+20; rv++ {
		sw.Send(t, watch.Modified, cachertest.NewPod(cachertest.PodName(int(rv%10)), rv, nil, ""))
	}
	c.waitRV(t, last+20)
	// Its channel holds 101..110, its pump 111: the history loses 112.
	const position = 100 + hub.ResultBuffer + 1
	c.DropHistoryThrough(position + 5)

	events := cachertest.DrainUntilClosed(t, w)
	if len(events) != hub.ResultBuffer+2 {
		t.Fatalf("got %d events, want the %d kept and the 410", len(events), hub.ResultBuffer+2)
	}
	for i, ev := range events[:hub.ResultBuffer+1] {
		if rv := cachertest.EventRV(t, ev); rv != uint64(101+i) {
			t.Fatalf("event #%d is %s, want @%d", i, cachertest.Describe(ev), 101+i)
		}
	}
	s := cachertest.ErrorStatus(t, events[len(events)-1])
	if s.Code != http.StatusGone || s.Reason != metav1.StatusReasonExpired {
		t.Errorf("status %d %s, want 410 Expired", s.Code, s.Reason)
	}
	if want := fmt.Sprintf("too old resource version: %d (%d)", position, position+5); s.Message != want {
		t.Errorf("message %q, want %q", s.Message, want)
	}
	if got := terminated(t, c) - terminatedBefore; got != 1 {
		t.Errorf("terminated watchers moved by %v, want 1", got)
	}
	if got := slowCount(t, c, cachemetrics.SlowPositionExpired) - expiredBefore; got != 1 {
		t.Errorf("closed_position_expired moved by %v, want 1", got)
	}
	if c.hub.Has(w) || c.hub.StalledLen() != 0 {
		t.Errorf("the closed watcher is still in the hub")
	}
	logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	if !strings.Contains(logs, "the history no longer holds its position") || !strings.Contains(logs, `reason="closed_position_expired"`) ||
		!strings.Contains(logs, fmt.Sprintf("position=%d", position)) {
		t.Errorf("no log line with the reason and the position; logs:\n%s", logs)
	}
}

// A WatchList watcher that stalls in its initial events, its end bookmark
// queued, keeps them: its client reads the initial events, the end
// bookmark, then every live event, in order, and the watch stays open.
func TestStalledWatchListWatcherKeepsItsInitialEventsAndEndBookmark(t *testing.T) {
	c, w, _ := watchListSetup(t, true)
	if !isStalled(c, w.(*hub.Watcher)) {
		t.Fatal("the WatchList watcher is not stalled")
	}
	for i := range hub.ResultBuffer + 2 {
		if ev := cachertest.NextEvent(t, w); ev.Type != watch.Added || mustName(t, ev) != cachertest.PodName(i) {
			t.Fatalf("initial event #%d: %s, want ADDED %s", i, cachertest.Describe(ev), cachertest.PodName(i))
		}
	}
	end := cachertest.NextEvent(t, w)
	if marked, _ := storage.HasInitialEventsEndBookmarkAnnotation(end.Object); end.Type != watch.Bookmark || !marked || cachertest.EventRV(t, end) != 100 {
		t.Fatalf("after the initial events: %s, want the initial-events-end bookmark @100", cachertest.Describe(end))
	}
	readInOrder(t, w, 100, 103, nil)
	cachertest.Poll(t, "the watcher to be registered again", func() bool { return c.hub.Has(w.(*hub.Watcher)) })
	if s := w.(*hub.Watcher).ListState(); s != watchlist.BookmarkSent {
		t.Errorf("WatchList state %v, want BookmarkSent", s)
	}
	sw, _ := c.fs.WaitWatch(t, 1)
	sw.Send(t, watch.Modified, cachertest.NewPod(cachertest.PodName(0), 104, nil, ""))
	readInOrder(t, w, 103, 104, nil)
}

// Every end of a watch ends a stalled one, its pump with it: its client's
// Stop, its context, the cache's Stop, a relist, the shutdown's EndWatches
// (after what was kept for it is read). BookmarkAll sends it nothing (a
// bookmark at the dispatched RV would claim events it has not had) and
// does not wait for it.
func TestStalledWatcherEnds(t *testing.T) {
	tests := []struct {
		name string
		// end ends w, stalled, with last the RV of the last event sent;
		// kept is whether its client then reads what was kept for it.
		end  func(t *testing.T, c *testCacher, sw *cachertest.FakeWatch, w *hub.Watcher, cancel context.CancelFunc)
		kept bool
	}{
		{name: "Stop", end: func(_ *testing.T, _ *testCacher, _ *cachertest.FakeWatch, w *hub.Watcher, _ context.CancelFunc) {
			w.Stop()
		}},
		{name: "context", end: func(_ *testing.T, _ *testCacher, _ *cachertest.FakeWatch, _ *hub.Watcher, cancel context.CancelFunc) {
			cancel()
		}},
		{name: "cache stopped", end: func(t *testing.T, c *testCacher, _ *cachertest.FakeWatch, _ *hub.Watcher, _ context.CancelFunc) {
			c.stopWithin(t, "it waits for a stalled watcher's pump", nil)
		}},
		{name: "relist", end: func(t *testing.T, c *testCacher, sw *cachertest.FakeWatch, _ *hub.Watcher, _ context.CancelFunc) {
			sw.SendError(t, &apierrors.NewResourceExpired("compacted").ErrStatus)
		}},
		{name: "EndWatches", kept: true, end: func(t *testing.T, c *testCacher, _ *cachertest.FakeWatch, _ *hub.Watcher, _ context.CancelFunc) {
			ctx, cancel := context.WithTimeout(context.Background(), cachertest.WaitFor)
			defer cancel()
			if queued, taken := c.BookmarkAll(ctx); queued != 0 || taken != 0 {
				t.Errorf("BookmarkAll queued %d bookmarks (%d taken), want none for a stalled watcher", queued, taken)
			}
			if n := c.EndWatches(); n != 1 {
				t.Errorf("EndWatches ended %d watches, want 1", n)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := cachertest.NewFakeStorage(100)
			c := newTestCacher(t, fs, func(cfg *Config) { cfg.WatcherBuffer = 2 })
			c.waitReady(t)
			sw, _ := fs.WaitWatch(t, 1)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			w := c.startWatch(t, ctx, "100", cachertest.Everything(true)).(*hub.Watcher)
			stallWith(t, c, sw, w, 100)
			if pumps() != 1 {
				t.Fatalf("%d pumps run, want the stalled watcher's", pumps())
			}
			tc.end(t, c, sw, w, cancel)
			events := cachertest.DrainUntilClosed(t, w)
			if tc.kept && len(events) != hub.ResultBuffer+1 {
				t.Errorf("got %d events, want the %d kept for it", len(events), hub.ResultBuffer+1)
			}
			for i, ev := range events {
				if ev.Type == watch.Bookmark || ev.Type == watch.Error || cachertest.EventRV(t, ev) != uint64(101+i) {
					t.Fatalf("event #%d: %s, want the event @%d", i, cachertest.Describe(ev), 101+i)
				}
			}
			expectNoWatcherGoroutines(t)
			if c.hub.StalledLen() != 0 {
				t.Errorf("%d stalled watchers left in the hub", c.hub.StalledLen())
			}
		})
	}
}

// A client that never reads again: its watch ends at its deadline, as any
// watch, and until then it holds its position and the one event its pump
// hands over, the rest of the history being fed to it only when it reads.
func TestStalledWatcherThatNeverReadsEndsAtItsDeadline(t *testing.T) {
	fs := cachertest.NewFakeStorage(100)
	c := newTestCacher(t, fs, func(cfg *Config) { cfg.WatcherBuffer = 2 })
	c.waitReady(t)
	sw, _ := fs.WaitWatch(t, 1)
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(time.Hour))
	defer cancel()
	w := c.startWatch(t, ctx, "100", cachertest.Everything(false)).(*hub.Watcher)
	last := stallWith(t, c, sw, w, 100)
	for rv := last + 1; rv <= last+200; rv++ {
		sw.Send(t, watch.Modified, cachertest.NewPod(cachertest.PodName(int(rv%10)), rv, nil, ""))
	}
	c.waitRV(t, last+200)
	if n, stalled := queued(w); n > 1 || !stalled {
		t.Errorf("a stalled watcher whose client reads nothing holds %d events queued (stalled: %v), want at most 1", n, stalled)
	}
	// The deadline is the request context's: its end is the watch's.
	cancel()
	cachertest.DrainUntilClosed(t, w)
	expectNoWatcherGoroutines(t)
}

func mustName(t *testing.T, ev watch.Event) string {
	t.Helper()
	m, err := meta.Accessor(ev.Object)
	if err != nil {
		t.Fatalf("%s: %v", cachertest.Describe(ev), err)
	}
	return m.GetName()
}

// BenchmarkStalledWatcherMemory measures what a watcher whose client stopped
// reading holds once it fell behind: stalled (the default), against the
// same watcher with a full queue (what it held before it was closed, with
// stalling off) and an idle one. Heap and goroutine stacks after a GC, per
// watcher, over 1,000 watchers of one cache at the default queue bound; the
// events themselves are the history's and shared by every watcher, so what
// is counted is what the watcher alone keeps alive.
//
//	go test ./cacher/ -run XXX -bench BenchmarkStalledWatcherMemory -benchtime 1x
func BenchmarkStalledWatcherMemory(b *testing.B) {
	const watchers = 1000
	measure := func(b *testing.B, stall bool, events int) float64 {
		fs := cachertest.NewFakeStorage(100)
		c := newTestCacher(b, fs, func(cfg *Config) { cfg.StallSlowWatchers = stall })
		ctx, cancel := context.WithTimeout(context.Background(), cachertest.WaitFor)
		defer cancel()
		if err := c.WaitReady(ctx); err != nil {
			b.Fatal(err)
		}
		sw, _ := fs.WaitWatch(b, 1)
		before := heapAndStacks()
		ws := make([]watch.Interface, watchers)
		for i := range ws {
			w, err := c.Watch(context.Background(), "/pods/", storage.ListOptions{ResourceVersion: "100", Recursive: true, Predicate: cachertest.Everything(false)})
			if err != nil {
				b.Fatal(err)
			}
			ws[i] = w
		}
		for i := 1; i <= events; i++ {
			sw.Send(b, watch.Modified, cachertest.NewPod(cachertest.PodName(i%10), uint64(100+i), nil, ""))
		}
		cachertest.Poll(b, "the dispatcher to hand out every event", func() bool {
			for _, w := range ws {
				n, stalled := queued(w.(*hub.Watcher))
				if !stalled && n+len(w.ResultChan()) < min(events, hub.ResultBuffer+DefaultWatcherBuffer) {
					return false
				}
				if stalled && n > 1 {
					return false
				}
			}
			return true
		})
		after := heapAndStacks()
		for _, w := range ws {
			w.Stop()
		}
		// Each cache stops before the next starts: the cleanup's check
		// looks for every cacher goroutine.
		c.Stop()
		return float64(int64(after)-int64(before)) / watchers
	}
	var idle, full, stalled float64
	for b.Loop() {
		idle = measure(b, true, 0)
		full = measure(b, false, hub.ResultBuffer+DefaultWatcherBuffer)
		stalled = measure(b, true, hub.ResultBuffer+DefaultWatcherBuffer+50)
	}
	b.ReportMetric(idle, "B/idle-watcher")
	b.ReportMetric(full, "B/full-queue-watcher")
	b.ReportMetric(stalled, "B/stalled-watcher")
}

// heapAndStacks is the live heap and the goroutine stacks in use, after a
// GC.
func heapAndStacks() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc + m.StackInuse
}
