package cacher

import (
	"context"
	"net/http"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"
	"github.com/watchkeeper/watchkeeper/cacher/internal/feed"
)

// etcd's client retries a dead watch stream without a word, so a silent
// storage watch is the only sign of an outage. The cache asks for progress
// after a third of the timeout, and after the whole of it without an answer
// goes not ready: reads get 429, watchers are closed, and it relists when
// storage answers again.
func TestSilentStorageWatchMakesTheCacheNotReady(t *testing.T) {
	const timeout = 9 * time.Second
	fs := cachertest.NewFakeStorage(100, cachertest.NewPod("a", 100, nil, ""))
	c := newTestCacher(t, fs, func(cfg *Config) { cfg.StorageSilenceTimeout = timeout })
	c.waitReady(t)
	sw, _ := fs.WaitWatch(t, 1)
	w := c.startWatch(t, context.Background(), "100", cachertest.Everything(false))

	// Answered progress keeps the cache ready however long the quiet lasts.
	for range 3 {
		before := fs.ProgressCount()
		c.stepTicks(t, 3, nil)
		cachertest.Poll(t, "a progress request after 3s of silence", func() bool { return fs.ProgressCount() > before })
		sw.SendBookmark(t, 100)
		cachertest.Poll(t, "the progress notification to be heard", func() bool {
			return c.feed.LastHeard().Equal(c.clk.Now())
		})
	}
	if !c.Ready() {
		t.Fatal("the cache went not ready although storage answered every progress request")
	}

	// An idle etcd answers no progress request for a watch that starts
	// above its revision, but it answers a read of its revision: nothing
	// new there, so the quiet is not an outage.
	quietFrom := c.clk.Now().UnixNano()
	c.stepTicks(t, int(timeout/time.Second)+3, nil)
	// The check of etcd's revision ran and took the answer as word from
	// etcd: it restarted the silence clock (nothing else could, storage
	// sent nothing).
	cachertest.Poll(t, "the revision check to conclude", func() bool {
		return !c.feed.VerifyingSilence() && c.feed.LastHeard().UnixNano() > quietFrom
	})
	if !c.Ready() {
		t.Fatal("the cache went not ready on an idle etcd that answers")
	}
	sw.SendBookmark(t, 100)
	cachertest.Poll(t, "the progress notification to be heard", func() bool {
		return c.feed.LastHeard().Equal(c.clk.Now())
	})

	// Now storage is gone: progress requests go out one at a time, the
	// revision cannot be read, and at the timeout the watch is given up:
	// the cache goes not ready and re-opens it from its RV, keeping its
	// state, its history and its watchers (no relist: etcd's client would
	// resume the watch where it was, and every client's resume stays good).
	fs.SetUnreachable(true)
	c.stepTicks(t, int(timeout/time.Second)-1, nil)
	if !c.Ready() {
		t.Fatal("the cache went not ready before the timeout")
	}
	c.clk.Step(time.Second)
	cachertest.Poll(t, "the cache to go not ready", func() bool { return !c.Ready() })
	if got := fs.ProgressCount(); got < 3+2 {
		t.Errorf("progress requests: %d, want at least one per quiet third after the first three", got)
	}
	err := c.GetList(context.Background(), "/pods/", storage.ListOptions{ResourceVersion: "0", Recursive: true, Predicate: cachertest.Everything(false)}, &example.PodList{})
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("list from cache while storage is silent: %v, want 429", err)
	}
	if status, ok := err.(apierrors.APIStatus); !ok || status.Status().Code != http.StatusTooManyRequests {
		t.Fatalf("error %v is not a 429 status", err)
	}
	if c.ReadinessCheck() == nil {
		t.Fatal("ReadinessCheck passes while storage is silent")
	}
	sw2, opts := fs.WaitWatch(t, 2)
	if opts.ResourceVersion != "100" {
		t.Errorf("the watch was re-opened from %q, want the cache's RV 100", opts.ResourceVersion)
	}
	cachertest.ExpectQuiet(t, w, "while storage is silent")

	// Storage comes back, idle: the re-opened watch starts above etcd's
	// revision and says nothing, but the next tick reads the revision,
	// finds nothing new and the cache is ready again.
	fs.SetUnreachable(false)
	back := c.clk.Now()
	for !c.Ready() {
		// A tick may find the last check still running and skip the
		// probe; the next one probes.
		c.clk.Step(time.Second)
		time.Sleep(time.Millisecond)
		// Well before a whole timeout of silence, when the silence check
		// would find the same.
		if c.clk.Since(back) > timeout/3 {
			t.Fatal("the cache was not ready again on an idle etcd within three ticks")
		}
	}
	// The re-opened watch carries on from the cache's RV, and so does the
	// client's watch.
	sw2.Send(t, watch.Modified, cachertest.NewPod("a", 101, nil, ""))
	if ev := cachertest.NextEvent(t, w); ev.Type != watch.Modified || cachertest.EventRV(t, ev) != 101 {
		t.Fatalf("after recovery got %s, want MODIFIED a@101", cachertest.Describe(ev))
	}
	if n := fs.ListCount(); n != 1 {
		t.Errorf("the cache listed %d times, want once: a silence is mended by a re-watch", n)
	}
}

// etcd's revision moves with every resource's writes, and a busy etcd (or a
// stream another watcher holds unsynced) may be slow to answer a progress
// request: etcd being ahead of a silent watch proves nothing. The check then
// keeps asking for as long as the timeout again, and only a watch that stays
// silent through that is lost.
func TestSilenceCheckWaitsForAnAnswerWhenEtcdIsAhead(t *testing.T) {
	const timeout = 9 * time.Second
	fs := cachertest.NewFakeStorage(100, cachertest.NewPod("a", 100, nil, ""))
	c := newTestCacher(t, fs, func(cfg *Config) { cfg.StorageSilenceTimeout = timeout })
	c.waitReady(t)
	sw, _ := fs.WaitWatch(t, 1)
	w := c.startWatch(t, context.Background(), "100", cachertest.Everything(false))

	// silentThrough steps the clock through a whole timeout of silence,
	// to the tick that starts the check, and waits for its answer wait to
	// be armed (the tick, its deadline and its poll: three timers at least).
	silentThrough := func() {
		t.Helper()
		c.stepTicks(t, int(timeout/time.Second)-1, nil)
		c.waitWaiters(t, cacheTimers)
		c.clk.Step(time.Second)
		cachertest.Poll(t, "the silence check to wait for an answer", func() bool {
			return !c.Ready() || c.feed.VerifyingSilence() && c.clk.Waiters() >= cacheTimers+2
		})
		if !c.Ready() {
			t.Fatal("the check called the watch lost because etcd was ahead, without waiting for an answer")
		}
	}

	// Other resources wrote; this one's progress requests go unanswered
	// for a timeout and more, then one is answered.
	fs.SetCurrentRV(200)
	silentThrough()
	for range int(timeout/time.Second) - 1 {
		c.clk.Step(time.Second)
		if !c.Ready() {
			t.Fatal("the cache went not ready while it still waited for an answer")
		}
	}
	sw.SendBookmark(t, 200)
	for c.feed.VerifyingSilence() {
		c.clk.Step(feed.ProgressRequestPeriod)
		time.Sleep(time.Millisecond)
	}
	if !c.Ready() {
		t.Fatal("the cache went not ready although its watch answered within the wait")
	}
	cachertest.ExpectQuiet(t, w, "after an answered silence")

	// A watch that stays silent through the wait is lost.
	fs.SetCurrentRV(300)
	silentThrough()
	for range int(timeout/time.Second) - 1 {
		c.clk.Step(time.Second)
	}
	if !c.Ready() {
		t.Fatal("the cache went not ready before the answer wait ended")
	}
	c.clk.Step(2 * time.Second)
	cachertest.Poll(t, "the cache to go not ready", func() bool { return !c.Ready() })
	fs.WaitWatch(t, 2) // re-opened from its RV
	cachertest.ExpectQuiet(t, w, "while the watch is re-opened")
}

// With a staleness bound, the tick asks etcd for progress when bookmarks are
// due within the next tick and the cache has been quiet for nearly the
// bound, so the bookmark carries the RV etcd confirmed rather than the last
// one the resource saw. Without it no request is made and the bookmark
// carries the old RV.
func TestFreshBookmarks(t *testing.T) {
	for _, tc := range []struct {
		name         string
		maxStaleness time.Duration
		wantRV       uint64
	}{
		{"bound 3s", 3 * time.Second, 150},
		{"off", 0, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := cachertest.NewFakeStorage(100)
			c := newTestCacher(t, fs, func(cfg *Config) {
				cfg.BookmarkFrequency = 10 * time.Second
				cfg.BookmarkMaxStaleness = tc.maxStaleness
			})
			c.waitReady(t)
			sw, _ := fs.WaitWatch(t, 1)
			w := c.startWatch(t, context.Background(), "100", cachertest.Everything(true))
			// Another resource is written meanwhile: etcd is at 150, but only a
			// progress notification tells this cache.
			fs.SetCurrentRV(150)
			var firstProbe int
			c.stepTicks(t, 10, func(step int) {
				if firstProbe == 0 && fs.ProgressCount() > 0 {
					firstProbe = step
					sw.SendBookmark(t, 150)
					c.waitRV(t, 150)
				}
			})
			switch {
			case tc.maxStaleness == 0 && fs.ProgressCount() != 0:
				t.Errorf("%d progress requests with the bound off", fs.ProgressCount())
			case tc.maxStaleness > 0 && firstProbe != 8:
				// Due at 10s; the tick at 8s is the first that sees it within
				// two granularities, with 8s of quiet past the 3s bound.
				t.Errorf("first progress request on tick %d, want 8", firstProbe)
			}
			ev := cachertest.NextEvent(t, w)
			if ev.Type != watch.Bookmark || cachertest.EventRV(t, ev) != tc.wantRV {
				t.Fatalf("got %s, want a bookmark at %d", cachertest.Describe(ev), tc.wantRV)
			}
		})
	}
}
