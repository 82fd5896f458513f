package cacher

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"weak"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachemetrics"
	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"
	"github.com/watchkeeper/watchkeeper/cacher/internal/feed"
	"github.com/watchkeeper/watchkeeper/cacher/internal/hub"
	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
	"github.com/watchkeeper/watchkeeper/internal/testchild"
)

// --- 2. Readiness ---

func TestNotReadyRetryAfter(t *testing.T) {
	tests := []struct {
		down time.Duration
		want int
	}{
		{0, 1},
		{10 * time.Second, 1},
		{20 * time.Second, 3},  // e^1.2
		{40 * time.Second, 11}, // e^2.4
		{56 * time.Second, 28}, // e^3.36
		{60 * time.Second, 30}, // e^3.6 = 36.6, capped
		{time.Hour, 30},        // capped
		{-time.Minute, 1},      // clock went backwards: at least 1s
		{1500 * time.Millisecond, 1},
	}
	for _, tc := range tests {
		t.Run(tc.down.String(), func(t *testing.T) {
			err := notReadyError(cachertest.Epoch.Add(tc.down), cachertest.Epoch)
			if !apierrors.IsTooManyRequests(err) {
				t.Fatalf("notReadyError = %v, want 429", err)
			}
			got, ok := apierrors.SuggestsClientDelay(err)
			if !ok || got != tc.want {
				t.Errorf("Retry-After = %d (%v), want %d", got, ok, tc.want)
			}
		})
	}
}

func TestReadiness(t *testing.T) {
	tests := []struct {
		name         string
		listFailures int
	}{
		{name: "first list succeeds", listFailures: 0},
		{name: "first list fails", listFailures: 1},
		{name: "three lists fail", listFailures: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := cachertest.NewFakeStorage(100, cachertest.NewPod("a", 100, nil, ""))
			fs.FailLists(tc.listFailures)
			tc2 := newTestCacher(t, fs, nil)

			for attempt := 1; attempt <= tc.listFailures; attempt++ {
				// The reflector backs off on the fake clock: tick + backoff.
				cachertest.Poll(t, "the reflector to back off", func() bool {
					return fs.ListCount() == attempt && tc2.clk.Waiters() == cacheTimers+1
				})
				if tc2.Ready() {
					t.Fatalf("Ready() = true after %d failed lists", attempt)
				}
				if err := tc2.ReadinessCheck(); !errors.Is(err, storage.ErrStorageNotReady) {
					t.Fatalf("ReadinessCheck() = %v, want ErrStorageNotReady", err)
				}
				w, err := tc2.Watch(context.Background(), "/pods/", storage.ListOptions{ResourceVersion: "0", Recursive: true, Predicate: cachertest.Everything(false)})
				if err == nil {
					w.Stop()
					t.Fatalf("Watch before the first list: got a watch, want 429")
				}
				if !apierrors.IsTooManyRequests(err) {
					t.Fatalf("Watch before the first list: %v, want 429 TooManyRequests", err)
				}
				if retry, ok := apierrors.SuggestsClientDelay(err); !ok || retry < 1 {
					t.Errorf("Watch before the first list: Retry-After = %d (%v), want >= 1", retry, ok)
				}
				tc2.clk.Step(time.Second) // past any backoff (<= 0.6s here)
			}

			tc2.waitReady(t)
			if !tc2.Ready() {
				t.Fatalf("Ready() = false after WaitReady returned")
			}
			if err := tc2.ReadinessCheck(); err != nil {
				t.Fatalf("ReadinessCheck() = %v once ready", err)
			}
			if got := fs.ListCount(); got != tc.listFailures+1 {
				t.Errorf("GetList called %d times, want %d", got, tc.listFailures+1)
			}
			w := tc2.startWatch(t, context.Background(), "0", cachertest.Everything(false))
			if ev := cachertest.NextEvent(t, w); ev.Type != watch.Added || cachertest.EventRV(t, ev) != 100 {
				t.Errorf("first event once ready: %s, want ADDED a@100", cachertest.Describe(ev))
			}
		})
	}
}

// Watch while not ready at the start: a 429 whose Retry-After is 1s.
func TestWatchBeforeFirstListIs429(t *testing.T) {
	fs := cachertest.NewFakeStorage(100)
	fs.FailLists(1)
	tc := newTestCacher(t, fs, nil)
	cachertest.Poll(t, "the reflector to back off", func() bool { return fs.ListCount() == 1 && tc.clk.Waiters() == cacheTimers+1 })
	_, err := tc.Watch(context.Background(), "/pods/", storage.ListOptions{ResourceVersion: "100", Recursive: true, Predicate: cachertest.Everything(true)})
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("Watch = %v, want 429", err)
	}
	if retry, ok := apierrors.SuggestsClientDelay(err); !ok || retry != 1 {
		t.Errorf("Retry-After = %d (%v), want 1", retry, ok)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := tc.WaitReady(ctx); err == nil {
		t.Errorf("WaitReady returned nil before the first list succeeded")
	}
}

// --- 3. Bookmark schedule ---

func TestBookmarkHeartbeat(t *testing.T) {
	tests := []struct {
		name          string
		bookmarks     bool
		wantBookmarks []int // steps (seconds) after which a bookmark arrives
	}{
		{name: "allowWatchBookmarks", bookmarks: true, wantBookmarks: []int{10, 20, 30}},
		{name: "no allowWatchBookmarks", bookmarks: false, wantBookmarks: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := cachertest.NewFakeStorage(100, cachertest.NewPod("a", 100, nil, ""))
			c := newTestCacher(t, fs, func(cfg *Config) {
				cfg.BookmarkFrequency = 10 * time.Second
				cfg.EventsHistoryWindow = time.Minute
			})
			c.waitReady(t)
			sw, _ := fs.WaitWatch(t, 1)
			w := c.startWatch(t, context.Background(), "100", cachertest.Everything(tc.bookmarks))

			var got []int
			lastEventRV := uint64(100)
			c.stepTicks(t, 30, func(step int) {
				if slices.Contains(tc.wantBookmarks, step) {
					ev := cachertest.NextEvent(t, w)
					if ev.Type != watch.Bookmark {
						t.Fatalf("after %ds: got %s, want a bookmark", step, cachertest.Describe(ev))
					}
					if rv := cachertest.EventRV(t, ev); rv < lastEventRV {
						t.Errorf("bookmark after %ds at RV %d, below the last event's %d", step, rv, lastEventRV)
					}
					got = append(got, step)
				}
				cachertest.ExpectQuiet(t, w, fmt.Sprintf("after %ds", step))
				if step == 15 {
					// One event between two heartbeats; none in the next period.
					sw.Send(t, watch.Modified, cachertest.NewPod("a", 105, map[string]string{"x": "y"}, ""))
					ev := cachertest.NextEvent(t, w)
					if ev.Type != watch.Modified || cachertest.EventRV(t, ev) != 105 {
						t.Fatalf("got %s, want MODIFIED a@105", cachertest.Describe(ev))
					}
					lastEventRV = 105
				}
			})
			if !slices.Equal(got, tc.wantBookmarks) {
				t.Errorf("bookmarks after %v s, want %v", got, tc.wantBookmarks)
			}
		})
	}
}

// Bookmarks carry exactly the RV of the newest event or storage progress
// the cache has dispatched.
func TestBookmarkCarriesDispatchedRV(t *testing.T) {
	fs := cachertest.NewFakeStorage(100, cachertest.NewPod("a", 100, nil, ""))
	c := newTestCacher(t, fs, func(cfg *Config) { cfg.BookmarkFrequency = 2 * time.Second })
	c.waitReady(t)
	sw, _ := fs.WaitWatch(t, 1)
	w := c.startWatch(t, context.Background(), "100", cachertest.WebPods())
	// The watcher's selector matches none of these; only the RV moves.
	wb := c.startWatch(t, context.Background(), "100", func() storage.SelectionPredicate {
		p := cachertest.WebPods()
		p.AllowWatchBookmarks = true
		return p
	}())
	_ = w
	sw.Send(t, watch.Modified, cachertest.NewPod("a", 103, map[string]string{"app": "db"}, ""))
	c.waitRV(t, 103)
	c.stepTicks(t, 2, nil)
	if ev := cachertest.NextEvent(t, wb); ev.Type != watch.Bookmark || cachertest.EventRV(t, ev) != 103 {
		t.Fatalf("got %s, want a bookmark at 103", cachertest.Describe(ev))
	}
	sw.SendBookmark(t, 110) // storage progress: no event, but the RV moves
	c.waitRV(t, 110)
	c.stepTicks(t, 2, nil)
	if ev := cachertest.NextEvent(t, wb); ev.Type != watch.Bookmark || cachertest.EventRV(t, ev) != 110 {
		t.Fatalf("got %s, want a bookmark at 110 (the storage progress)", cachertest.Describe(ev))
	}
	cachertest.ExpectQuiet(t, w, "watcher without bookmarks")
}

// --- 4. Pre-deadline bookmark ---

func TestPreDeadlineBookmark(t *testing.T) {
	tests := []struct {
		name      string
		deadline  time.Duration // after the watch starts
		offset    time.Duration
		wantFirst int // step of the first bookmark; 0: none at all
	}{
		{name: "deadline before the heartbeat", deadline: 5 * time.Second, offset: 2 * time.Second, wantFirst: 3},
		{name: "another offset", deadline: 7 * time.Second, offset: 3 * time.Second, wantFirst: 4},
		{name: "heartbeat before the deadline", deadline: 30 * time.Second, offset: 2 * time.Second, wantFirst: 10},
		{name: "pre-deadline time already passed", deadline: time.Second, offset: 2 * time.Second, wantFirst: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := cachertest.NewFakeStorage(100)
			c := newTestCacher(t, fs, func(cfg *Config) {
				cfg.BookmarkFrequency = 10 * time.Second
				cfg.BookmarkPreDeadlineOffset = tc.offset
			})
			c.waitReady(t)
			// The deadline is on the fake clock, years ahead of the real one,
			// so the context never actually expires during the test.
			ctx, cancel := context.WithDeadline(context.Background(), c.clk.Now().Add(tc.deadline))
			defer cancel()
			w := c.startWatch(t, ctx, "100", cachertest.Everything(true))

			var got []int
			last := int((tc.deadline - tc.offset) / time.Second)
			c.stepTicks(t, 12, func(step int) {
				// The tick is done: a bookmark it sent is in the channel.
				select {
				case ev := <-w.ResultChan():
					if ev.Type != watch.Bookmark {
						t.Fatalf("after %ds: got %s, want only bookmarks", step, cachertest.Describe(ev))
					}
					got = append(got, step)
				default:
				}
			})
			switch {
			case tc.wantFirst == 0 && len(got) > 0:
				t.Errorf("bookmarks after %v s, want none", got)
			case tc.wantFirst == 0:
			case len(got) == 0 || got[0] != tc.wantFirst:
				t.Errorf("bookmarks after %v s, want the first after %ds", got, tc.wantFirst)
			case tc.deadline < 10*time.Second && len(got) != 1:
				// The calendar pops a slot up to a granularity early; the
				// watcher must not be filed again for the same bookmark.
				t.Errorf("bookmarks after %v s: after the pre-deadline one at %ds the watch should only wait for its deadline", got, last)
			}
			t.Logf("bookmarks after %v s", got)
		})
	}
}

// --- 5. Event conversion ---

func TestWatchEventConversion(t *testing.T) {
	web := map[string]string{"app": "web"}
	db := map[string]string{"app": "db"}
	type step struct {
		typ  watch.EventType
		pod  *example.Pod
		want watch.EventType // "" for no event
		// wantLabels are the labels of the object the watcher gets: the old
		// ones when an update moved the object out of the selector.
		wantLabels map[string]string
	}
	steps := []step{
		{typ: watch.Modified, pod: cachertest.NewPod("a", 101, db, ""), want: watch.Deleted, wantLabels: web},     // matching -> not
		{typ: watch.Modified, pod: cachertest.NewPod("b", 102, web, ""), want: watch.Added, wantLabels: web},      // not -> matching
		{typ: watch.Deleted, pod: cachertest.NewPod("c", 103, web, ""), want: watch.Deleted, wantLabels: web},     // delete of a matching one
		{typ: watch.Deleted, pod: cachertest.NewPod("a", 104, db, ""), want: ""},                                  // delete of a non-matching one
		{typ: watch.Modified, pod: cachertest.NewPod("b", 105, web, "n1"), want: watch.Modified, wantLabels: web}, // matching -> matching
		{typ: watch.Added, pod: cachertest.NewPod("d", 106, db, ""), want: ""},
		{typ: watch.Added, pod: cachertest.NewPod("e", 107, web, ""), want: watch.Added, wantLabels: web},
		{typ: watch.Modified, pod: cachertest.NewPod("d", 108, db, "n2"), want: ""}, // not -> not
	}
	sentinel := cachertest.NewPod("z", 200, web, "")
	for _, mode := range []string{"live", "replayed from history"} {
		t.Run(mode, func(t *testing.T) {
			fs := cachertest.NewFakeStorage(100,
				cachertest.NewPod("a", 90, web, ""), cachertest.NewPod("b", 91, db, ""), cachertest.NewPod("c", 92, web, ""))
			c := newTestCacher(t, fs, nil)
			c.waitReady(t)
			sw, _ := fs.WaitWatch(t, 1)
			var w watch.Interface
			if mode == "live" {
				w = c.startWatch(t, context.Background(), "100", cachertest.WebPods())
			}
			for _, s := range steps {
				sw.Send(t, s.typ, s.pod)
			}
			sw.Send(t, watch.Added, sentinel)
			c.waitRV(t, 200)
			if mode != "live" {
				w = c.startWatch(t, context.Background(), "100", cachertest.WebPods())
			}
			for _, s := range steps {
				if s.want == "" {
					continue
				}
				ev := cachertest.NextEvent(t, w)
				rv := cachertest.EventRV(t, ev)
				m, _ := meta.Accessor(ev.Object)
				if ev.Type != s.want || m.GetName() != s.pod.Name || strconv.FormatUint(rv, 10) != s.pod.ResourceVersion {
					t.Fatalf("storage %s %s@%s: got %s, want %s %s@%s",
						s.typ, s.pod.Name, s.pod.ResourceVersion, cachertest.Describe(ev), s.want, s.pod.Name, s.pod.ResourceVersion)
				}
				if !labels.Equals(m.GetLabels(), s.wantLabels) {
					t.Errorf("storage %s %s@%s: got labels %v, want %v", s.typ, s.pod.Name, s.pod.ResourceVersion, m.GetLabels(), s.wantLabels)
				}
			}
			// Nothing else came between: the next event is the sentinel.
			if ev := cachertest.NextEvent(t, w); ev.Type != watch.Added || cachertest.EventRV(t, ev) != 200 {
				t.Fatalf("got %s, want the sentinel ADDED z@200", cachertest.Describe(ev))
			}
		})
	}
}

// The DELETED sent when an update moves an object out of the selector must
// not share the cached object: changing its RV must not change the cache.
func TestMovedOutDeleteDoesNotMutateCache(t *testing.T) {
	fs := cachertest.NewFakeStorage(100, cachertest.NewPod("a", 90, map[string]string{"app": "web"}, ""))
	c := newTestCacher(t, fs, nil)
	c.waitReady(t)
	sw, _ := fs.WaitWatch(t, 1)
	before := c.startWatch(t, context.Background(), "0", cachertest.Everything(false))
	if ev := cachertest.NextEvent(t, before); ev.Type != watch.Added || cachertest.EventRV(t, ev) != 90 {
		t.Fatalf("got %s, want ADDED a@90", cachertest.Describe(ev))
	}
	w := c.startWatch(t, context.Background(), "100", cachertest.WebPods())
	sw.Send(t, watch.Modified, cachertest.NewPod("a", 101, map[string]string{"app": "db"}, ""))
	if ev := cachertest.NextEvent(t, w); ev.Type != watch.Deleted || cachertest.EventRV(t, ev) != 101 {
		t.Fatalf("got %s, want DELETED a@101", cachertest.Describe(ev))
	}
	// Replaying from 100 converts the same history event again; the old
	// object the first conversion copied must still be at 90.
	var since []*objects.Event
	c.state.Read(func() {
		var ok bool
		if since, ok = c.state.SinceLocked(100); !ok {
			t.Fatal("the history does not reach back to 100")
		}
	})
	for _, e := range since {
		if e.Prev != nil {
			prev, err := e.Prev.Get()
			if err != nil {
				t.Fatal(err)
			}
			if rv, _ := c.cfg.Versioner.ObjectResourceVersion(prev); rv != 90 {
				t.Errorf("the cached previous object's RV is %d after conversion, want 90", rv)
			}
		}
	}
}

// --- 6. Watch errors: too old, too new ---

func TestWatchTooOldResourceVersion(t *testing.T) {
	tests := []struct {
		name     string
		prepare  func(t *testing.T, c *testCacher, sw *cachertest.FakeWatch)
		capacity int // of the history; 0 the default
		rv       string
		want410  bool
		wantRVs  []uint64 // when not 410: the events replayed
	}{
		{name: "below the list RV", rv: "50", want410: true},
		{name: "just below the list RV", rv: "99", want410: true},
		{name: "the list RV", rv: "100", wantRVs: []uint64{101, 102, 103, 104, 105}},
		{
			// Upstream keeps its buffer until it needs the room: so does
			// the history (issue 11), the window being a guarantee.
			name:    "older than the window, no write since",
			prepare: expireAll,
			rv:      "101", wantRVs: []uint64{102, 103, 104, 105},
		},
		{
			name:     "evicted for room",
			capacity: 3,
			rv:       "101", want410: true,
		},
		{
			name:     "evicted for room, from the last evicted",
			capacity: 3,
			rv:       "102", wantRVs: []uint64{103, 104, 105},
		},
		{
			// Upstream's cache serves a resume from its buffer whatever
			// etcd compacted (its compactor prunes only list snapshots);
			// the events are the ones etcd sent before it compacted.
			name:    "compacted by etcd",
			prepare: compactAt(103),
			rv:      "101", wantRVs: []uint64{102, 103, 104, 105},
		},
		{
			name:     "compacted by etcd and evicted for room",
			capacity: 3,
			prepare:  compactAt(103),
			rv:       "101", want410: true,
		},
		{
			name:    "compacted by etcd, from the compaction",
			prepare: compactAt(103),
			rv:      "103", wantRVs: []uint64{104, 105},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := cachertest.NewFakeStorage(100)
			c := newTestCacher(t, fs, func(cfg *Config) {
				cfg.BookmarkFrequency = 5 * time.Second
				cfg.EventsHistoryWindow = 10 * time.Second
				if tc.capacity > 0 {
					cfg.HistoryCapacity = tc.capacity
				}
			})
			c.waitReady(t)
			sw, _ := fs.WaitWatch(t, 1)
			for rv := uint64(101); rv <= 105; rv++ {
				sw.Send(t, watch.Added, cachertest.NewPod(cachertest.PodName(int(rv)), rv, nil, ""))
			}
			c.waitRV(t, 105)
			if tc.prepare != nil {
				tc.prepare(t, c, sw)
			}
			w := c.startWatch(t, context.Background(), tc.rv, cachertest.Everything(false))
			if tc.want410 {
				s := cachertest.ErrorStatus(t, cachertest.NextEvent(t, w))
				if s.Code != 410 || s.Reason != metav1.StatusReasonExpired {
					t.Errorf("got status %d %s (%q), want 410 Expired", s.Code, s.Reason, s.Message)
				}
				if rest := cachertest.DrainUntilClosed(t, w); len(rest) != 0 {
					t.Errorf("events after the error: %d", len(rest))
				}
				return
			}
			for _, want := range tc.wantRVs {
				if ev := cachertest.NextEvent(t, w); ev.Type != watch.Added || cachertest.EventRV(t, ev) != want {
					t.Fatalf("got %s, want ADDED @%d", cachertest.Describe(ev), want)
				}
			}
			sw.Send(t, watch.Added, cachertest.NewPod("sentinel", 300, nil, ""))
			if ev := cachertest.NextEvent(t, w); cachertest.EventRV(t, ev) != 300 {
				t.Fatalf("got %s, want the sentinel @300", cachertest.Describe(ev))
			}
		})
	}
}

// expireAll steps the fake clock past the history window (10s), tick by
// tick, so every event is older than the window.
func expireAll(t *testing.T, c *testCacher, _ *cachertest.FakeWatch) {
	c.stepTicks(t, 11, nil)
}

// compactAt has etcd compact at rev, and ticks so the cache hears of it.
func compactAt(rev int64) func(t *testing.T, c *testCacher, _ *cachertest.FakeWatch) {
	return func(t *testing.T, c *testCacher, _ *cachertest.FakeWatch) {
		c.fs.SetCompactRevision(rev)
		c.stepTicks(t, 2, nil)
	}
}

func TestWatchTooLargeResourceVersion(t *testing.T) {
	tests := []struct {
		name string
		// catchUp is what the storage sends while the watch waits; nil: nothing.
		catchUp func(t *testing.T, sw *cachertest.FakeWatch)
	}{
		{name: "the cache never gets there"},
		{name: "a storage progress notification gets it there", catchUp: func(t *testing.T, sw *cachertest.FakeWatch) { sw.SendBookmark(t, 200) }},
		{name: "an event gets it there", catchUp: func(t *testing.T, sw *cachertest.FakeWatch) {
			sw.Send(t, watch.Added, cachertest.NewPod("late", 200, nil, ""))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := cachertest.NewFakeStorage(100)
			c := newTestCacher(t, fs, nil)
			c.waitReady(t)
			sw, _ := fs.WaitWatch(t, 1)

			// Only a WatchList waits for its RV; a plain watch starts at
			// once (TestPlainWatchAheadStartsAtOnce).
			done := watchAsync(c, "/pods/", storage.ListOptions{ResourceVersion: "200", Recursive: true,
				Predicate: cachertest.Everything(true), SendInitialEvents: ptr.To(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
			// Waiting: the tick, the freshness timeout and the progress timer
			// are armed, and etcd was asked for progress once.
			cachertest.Poll(t, "the watch to wait for RV 200", func() bool { return fs.ProgressCount() == 1 && c.clk.Waiters() == cacheTimers+2 })
			// Every progressRequestPeriod it asks again.
			c.clk.Step(feed.ProgressRequestPeriod)
			cachertest.Poll(t, "a second progress request", func() bool { return fs.ProgressCount() == 2 && c.clk.Waiters() == cacheTimers+2 })
			c.clk.Step(feed.FreshnessTimeout - 2*feed.ProgressRequestPeriod)
			// Still waiting: its freshness timer is armed until it returns.
			cachertest.Poll(t, "the progress timer to be re-armed", func() bool { return fs.ProgressCount() == 3 && c.clk.Waiters() == cacheTimers+2 })
			select {
			case r := <-done:
				t.Fatalf("Watch returned (%v) before the freshness timeout", r.err)
			default:
			}

			if tc.catchUp != nil {
				tc.catchUp(t, sw)
				r := <-done
				if r.err != nil {
					t.Fatalf("Watch: %v", r.err)
				}
				defer r.w.Stop()
				// The initial state at 200, then the bookmark ending it.
				for {
					ev := cachertest.NextEvent(t, r.w)
					if ev.Type == watch.Bookmark {
						if rv := cachertest.EventRV(t, ev); rv < 200 {
							t.Fatalf("initial-events-end bookmark at %d, below the floor 200", rv)
						}
						break
					}
					if ev.Type != watch.Added {
						t.Fatalf("initial events: got %s, want ADDED", cachertest.Describe(ev))
					}
				}
				sw.Send(t, watch.Added, cachertest.NewPod("after", 201, nil, ""))
				if ev := cachertest.NextEvent(t, r.w); ev.Type != watch.Added || cachertest.EventRV(t, ev) != 201 {
					t.Fatalf("got %s, want ADDED after@201 (nothing at or below 200)", cachertest.Describe(ev))
				}
				return
			}

			c.clk.Step(2 * feed.ProgressRequestPeriod) // reaches the 3s timeout
			var r watchResult
			select {
			case r = <-done:
			case <-time.After(cachertest.WaitFor):
				t.Fatalf("Watch still waiting after the freshness timeout on the config clock")
			}
			if r.err != nil {
				t.Fatalf("Watch returned the error %v; want it in the stream, as etcd3 does", r.err)
			}
			ev := cachertest.NextEvent(t, r.w)
			s := cachertest.ErrorStatus(t, ev)
			err := apierrors.FromObject(ev.Object)
			if !storage.IsTooLargeResourceVersion(err) {
				t.Errorf("error %v is not a TooLargeResourceVersion error", err)
			}
			if s.Code != 504 || s.Reason != metav1.StatusReasonTimeout {
				t.Errorf("status %d %s, want 504 Timeout", s.Code, s.Reason)
			}
			// apierrors.NewTimeoutError prefixes "Timeout: ".
			if want := "Timeout: Too large resource version: 200, current: 100"; s.Message != want {
				t.Errorf("message %q, want %q", s.Message, want)
			}
			if retry, ok := apierrors.SuggestsClientDelay(err); !ok || retry != 1 {
				t.Errorf("Retry-After = %d (%v), want 1", retry, ok)
			}
			if rest := cachertest.DrainUntilClosed(t, r.w); len(rest) != 0 {
				t.Errorf("events after the error: %d", len(rest))
			}
		})
	}
}

// A plain watch from an RV the cache has not reached starts at once, as
// upstream's cache and etcd start it, and hears only what comes after it.
func TestPlainWatchAheadStartsAtOnce(t *testing.T) {
	fs := cachertest.NewFakeStorage(100)
	c := newTestCacher(t, fs, nil)
	c.waitReady(t)
	sw, _ := fs.WaitWatch(t, 1)
	done := make(chan watch.Interface, 1)
	go func() {
		w, err := c.Watch(context.Background(), "/pods/", storage.ListOptions{ResourceVersion: "200", Recursive: true, Predicate: cachertest.Everything(true)})
		if err != nil {
			t.Errorf("Watch: %v", err)
		}
		done <- w
	}()
	var w watch.Interface
	select {
	case w = <-done:
	case <-time.After(cachertest.WaitFor):
		// The fake clock never moves here: a wait for the RV would hang.
		t.Fatalf("a plain watch from an RV ahead of the cache did not start")
	}
	if w == nil {
		return
	}
	defer w.Stop()
	if n := fs.ProgressCount(); n != 0 {
		t.Errorf("%d progress requests for a plain watch, want 0: it waits for nothing", n)
	}
	sw.Send(t, watch.Added, cachertest.NewPod("before", 150, nil, ""))
	sw.Send(t, watch.Added, cachertest.NewPod("at", 200, nil, ""))
	sw.Send(t, watch.Added, cachertest.NewPod("after", 201, nil, ""))
	if ev := cachertest.NextEvent(t, w); ev.Type != watch.Added || cachertest.EventRV(t, ev) != 201 {
		t.Fatalf("got %s, want ADDED after@201 (nothing at or below 200)", cachertest.Describe(ev))
	}
}

// --- 7. Slow watchers ---
//
// With stalling on (the default) a watcher that falls behind stalls and
// resumes (stall_test.go); these are the rules for when it falls behind,
// and, with stalling off, what closing it does.

// With stalling off (--watch-cache-stall-slow-watchers=false), a watcher
// whose queue is full is closed, as upstream's cache closes it, and the
// others get everything.
func TestSlowWatcherIsClosedOthersGetEverything(t *testing.T) {
	const (
		watcherBuffer = 2
		total         = 60
	)
	for _, clockName := range []string{"fake clock", "real clock"} {
		t.Run(clockName, func(t *testing.T) {
			fs := cachertest.NewFakeStorage(100)
			c := newTestCacher(t, fs, func(cfg *Config) {
				cfg.WatcherBuffer = watcherBuffer
				cfg.StallSlowWatchers = false
				if clockName == "real clock" {
					cfg.Clock = clock.RealClock{}
				}
			})
			c.waitReady(t)
			sw, _ := fs.WaitWatch(t, 1)
			reader := c.startWatch(t, context.Background(), "100", cachertest.Everything(false))
			slow := c.startWatch(t, context.Background(), "100", cachertest.Everything(false))
			terminatedBefore := terminated(t, c)

			got := make(chan uint64, total)
			readerDone := make(chan struct{})
			go func() {
				defer close(readerDone)
				for ev := range reader.ResultChan() {
					rv, _ := storage.APIObjectVersioner{}.ObjectResourceVersion(ev.Object)
					got <- rv
					if len(got) == total {
						return
					}
				}
			}()
			defer func() { reader.Stop(); <-readerDone }()
			var received []uint64
			receive := func(n int) {
				t.Helper()
				for len(received) < n {
					select {
					case rv := <-got:
						received = append(received, rv)
					case <-time.After(cachertest.WaitFor):
						t.Fatalf("the reading watcher got %d of %d events", len(received), n)
					}
				}
			}
			// One event at a time, the reader taking each before the next, so
			// only the slow watcher falls behind.
			for i := 1; i <= total; i++ {
				sw.Send(t, watch.Added, cachertest.NewPod(cachertest.PodName(i), uint64(100+i), nil, ""))
				receive(i)
			}
			for i, rv := range received {
				if rv != uint64(101+i) {
					t.Fatalf("the reading watcher got RVs %v, want 101..%d in order", received, 100+total)
				}
			}

			// What was in the slow client's channel stays readable; what was
			// queued behind it is dropped with the watcher. One more may come:
			// a pump waiting to send when the watcher closes has two ready
			// cases once the drain frees a slot, and select picks either (the
			// client still gets an unbroken run of events, then the close).
			rest := cachertest.DrainUntilClosed(t, slow)
			if len(rest) < hub.ResultBuffer || len(rest) > hub.ResultBuffer+1 {
				t.Errorf("the slow watcher delivered %d events before closing, want the %d in its channel (or one more, in flight)", len(rest), hub.ResultBuffer)
			}
			for i, ev := range rest {
				if rv := cachertest.EventRV(t, ev); rv != uint64(101+i) {
					t.Fatalf("the slow watcher's events are not 101.. in order: #%d is %s", i, cachertest.Describe(ev))
				}
			}
			if got := terminated(t, c) - terminatedBefore; got != 1 {
				t.Errorf("terminated watchers metric moved by %v, want 1", got)
			}
		})
	}
}

// A client that reads slower than events come, but keeps reading, is never
// stalled (nor closed, with stalling off) while its queue has room: only one
// that takes nothing for SlowClientTimeout is. Upstream closes a client the
// dispatcher waited on for 100ms, which on a busy machine is any client.
func TestSlowButReadingWatcherIsNotClosed(t *testing.T) {
	const events = 30
	fs := cachertest.NewFakeStorage(100)
	c := newTestCacher(t, fs, func(cfg *Config) { cfg.WatcherBuffer = events })
	c.waitReady(t)
	sw, _ := fs.WaitWatch(t, 1)
	w := c.startWatch(t, context.Background(), "100", cachertest.Everything(false)).(*hub.Watcher)
	terminatedBefore, stalledBefore := terminated(t, c), slowCount(t, c, cachemetrics.SlowStalled)
	// unread is the RVs sent that the client has not read, in order.
	var unread []uint64
	send := func(typ watch.EventType, name string, rv uint64) {
		t.Helper()
		sw.Send(t, typ, cachertest.NewPod(name, rv, nil, ""))
		unread = append(unread, rv)
	}
	read := func() {
		t.Helper()
		ev := cachertest.NextEvent(t, w)
		if rv := cachertest.EventRV(t, ev); rv != unread[0] {
			t.Fatalf("got %s, want @%d (of %v unread)", cachertest.Describe(ev), unread[0], unread)
		}
		unread = unread[1:]
	}
	// pending is what the client has not taken: its channel and its queue.
	pending := func() int {
		inChan, queued := w.Pending()
		return inChan + queued
	}
	// settled waits until the dispatcher and the pump have done their part,
	// so the fake clock never runs ahead of them.
	settled := func(want int) {
		t.Helper()
		cachertest.Poll(t, fmt.Sprintf("%d events pending with a full channel", want), func() bool {
			inChan, _ := w.Pending()
			return pending() == want && (inChan == hub.ResultBuffer || want < hub.ResultBuffer)
		})
	}
	for i := 1; i <= events; i++ {
		send(watch.Added, cachertest.PodName(i), uint64(100+i))
	}
	settled(events)
	// The client takes one event every 9s of the cache's clock: 270s in all,
	// far beyond the timeout, but never 10s without progress.
	want := events
	for i := 1; i <= events; i++ {
		c.clk.Step(hub.SlowClientTimeout - time.Second)
		read()
		want--
		settled(want)
		// Each event that finds the queue non-empty checks the client's
		// progress; push one more now and then so the check runs.
		if i%5 == 0 {
			send(watch.Modified, cachertest.PodName(i), uint64(100+events+i))
			want++
			settled(want)
		}
	}
	if got := terminated(t, c) - terminatedBefore; got != 0 {
		t.Fatalf("terminated watchers = %v, want 0 for a client that kept reading", got)
	}
	if got := slowCount(t, c, cachemetrics.SlowStalled) - stalledBefore; got != 0 {
		t.Fatalf("stalled watchers = %v, want 0 for a client that kept reading", got)
	}

	// A client that stops taking events is stalled by the first event that
	// finds it behind for longer than the timeout: fill its channel so
	// events queue, then let the clock run.
	for i := 1; want <= hub.ResultBuffer; i++ {
		send(watch.Modified, cachertest.PodName(i), uint64(200+i))
		want++
	}
	settled(want)
	c.clk.Step(hub.SlowClientTimeout + time.Second)
	send(watch.Modified, cachertest.PodName(1), 1000)
	cachertest.Poll(t, "the watcher behind for longer than the timeout to stall", func() bool {
		return slowCount(t, c, cachemetrics.SlowStalled)-stalledBefore == 1
	})
	if got := terminated(t, c) - terminatedBefore; got != 0 {
		t.Fatalf("terminated watchers = %v, want 0: it stalls", got)
	}
	// Read, it has everything, in order, the last event included.
	for len(unread) > 0 {
		read()
	}
}

// terminated reads the cache's closed-for-slowness counter, which upstream's
// collector keeps for the whole process.
func terminated(t *testing.T, c *testCacher) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(c.metrics.TerminatedWatchers)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// --- WatchList watchers closed for being slow ---

// watchListSetup starts a WatchList watch (sendInitialEvents=true, RV "",
// bookmarks) over more objects than the result buffer, never reads it, and
// pushes events until the dispatcher takes it out of the fan-out for being
// slow: with stall, it stalls (stall.go); without, its end bookmark was
// accepted but not sent, so it is closed gracefully.
func watchListSetup(t *testing.T, stall bool) (*testCacher, watch.Interface, context.CancelFunc) {
	t.Helper()
	const pods = hub.ResultBuffer + 2
	var list []*example.Pod
	for i := range pods {
		list = append(list, cachertest.NewPod(cachertest.PodName(i), uint64(10+i), nil, ""))
	}
	fs := cachertest.NewFakeStorage(100, list...)
	c := newTestCacher(t, fs, func(cfg *Config) {
		cfg.WatcherBuffer = 2
		cfg.BookmarkFrequency = 10 * time.Second
		cfg.StallSlowWatchers = stall
	})
	c.waitReady(t)
	sw, _ := fs.WaitWatch(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := c.Watch(ctx, "/pods/", storage.ListOptions{
		ResourceVersion: "", SendInitialEvents: ptr.To(true), Recursive: true, Predicate: cachertest.Everything(true),
	})
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	t.Cleanup(w.Stop)
	for rv := uint64(101); rv <= 103; rv++ {
		sw.Send(t, watch.Modified, cachertest.NewPod(cachertest.PodName(0), rv, nil, ""))
	}
	// The initial events do not count against the queue's bound, the live
	// ones do: the third finds it full.
	cachertest.Poll(t, "the dispatcher to stall or close the slow watcher", func() bool {
		return !c.hub.Has(w.(*hub.Watcher))
	})
	return c, w, cancel
}

// With stalling off, a WatchList watcher whose end bookmark is queued is
// drained and closed, so that its client resumes from that bookmark.
func TestSlowWatchListWatcherIsDrainedGracefully(t *testing.T) {
	_, w, _ := watchListSetup(t, false)
	events := cachertest.DrainUntilClosed(t, w)
	var types []string
	for _, ev := range events {
		types = append(types, cachertest.Describe(ev))
	}
	if len(events) < hub.ResultBuffer+3 {
		t.Fatalf("got %d events, want the %d initial ones and the end bookmark:\n%s", len(events), hub.ResultBuffer+3, strings.Join(types, "\n"))
	}
	for i := range hub.ResultBuffer + 2 {
		if m, _ := meta.Accessor(events[i].Object); events[i].Type != watch.Added || m.GetName() != cachertest.PodName(i) {
			t.Fatalf("event #%d: %s, want ADDED %s", i, cachertest.Describe(events[i]), cachertest.PodName(i))
		}
	}
	end := events[hub.ResultBuffer+2]
	if marked, _ := storage.HasInitialEventsEndBookmarkAnnotation(end.Object); end.Type != watch.Bookmark || !marked || cachertest.EventRV(t, end) < 100 {
		t.Fatalf("after the initial events: %s, want the initial-events-end bookmark at >= 100", cachertest.Describe(end))
	}
	last := cachertest.EventRV(t, end)
	for _, ev := range events[hub.ResultBuffer+3:] {
		if rv := cachertest.EventRV(t, ev); ev.Type != watch.Modified || rv <= last || rv > 103 {
			t.Fatalf("after the end bookmark: %s, want MODIFIED in 101..103 in order", cachertest.Describe(ev))
		}
		last = cachertest.EventRV(t, ev)
	}
}

// Stop ends every watcher and waits for their goroutines (cacher.go). A
// watcher closed gracefully for being slow has left the watcher set but its
// goroutine still waits for its client.
func TestStopEndsGracefullyClosingWatcher(t *testing.T) {
	c, w, cancel := watchListSetup(t, false)
	// When Stop hangs, the client going away is what frees it.
	c.stopWithin(t, "it waits for a gracefully closed watcher whose client does not read, and never stops it", cancel)
	cachertest.DrainUntilClosed(t, w)
}

// A watcher closed gracefully keeps its slot on the bookmark calendar; when
// the slot comes up, the tick must not send on its closed input. A panic on
// the dispatcher goroutine kills the process, so the scenario runs in a
// child process.
func TestBookmarkTickAfterGracefulClose(t *testing.T) {
	if !testchild.Isolate(t) {
		return
	}
	c, w, _ := watchListSetup(t, false)
	// The watcher was filed for a heartbeat 10s after it started.
	c.stepTicks(t, 12, nil)
	events := cachertest.DrainUntilClosed(t, w)
	if len(events) < hub.ResultBuffer+3 {
		t.Fatalf("got %d events, want at least the initial ones and the end bookmark", len(events))
	}
}

// --- 8. Storage watch errors: relist on a compaction, re-watch on the rest ---

func TestStorageWatchErrorRelists(t *testing.T) {
	tests := []struct {
		name string
		// fail ends the storage watch.
		fail       func(t *testing.T, sw *cachertest.FakeWatch)
		wantRelist bool
	}{
		{
			name: "410 Gone (compacted)",
			fail: func(t *testing.T, sw *cachertest.FakeWatch) {
				sw.SendError(t, &apierrors.NewResourceExpired("compacted").ErrStatus)
			},
			wantRelist: true,
		},
		{
			// etcd3 reports "etcdserver: no leader" (a watch opened
			// WithRequireLeader during an election) as an InternalError.
			name: "500 Internal error (no leader)",
			fail: func(t *testing.T, sw *cachertest.FakeWatch) {
				sw.SendError(t, &apierrors.NewInternalError(fmt.Errorf("etcdserver: no leader")).ErrStatus)
			},
			wantRelist: false,
		},
		{
			name: "503 Service unavailable",
			fail: func(t *testing.T, sw *cachertest.FakeWatch) {
				sw.SendError(t, &apierrors.NewServiceUnavailable("etcd unavailable").ErrStatus)
			},
			wantRelist: false,
		},
		{
			name:       "stream closed without an error",
			fail:       func(t *testing.T, sw *cachertest.FakeWatch) { sw.CloseStream() },
			wantRelist: false,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := cachertest.NewFakeStorage(100, cachertest.NewPod("a", 100, nil, ""))
			c := newTestCacher(t, fs, nil)
			c.waitReady(t)
			sw, opts := fs.WaitWatch(t, 1)
			if opts.ResourceVersion != "100" || !opts.ProgressNotify || !opts.Predicate.AllowWatchBookmarks {
				t.Errorf("storage watch opened with RV %q, progressNotify %v, bookmarks %v; want 100, true, true",
					opts.ResourceVersion, opts.ProgressNotify, opts.Predicate.AllowWatchBookmarks)
			}
			plain := c.startWatch(t, context.Background(), "100", cachertest.Everything(false))
			withBookmarks := c.startWatch(t, context.Background(), "0", cachertest.Everything(true))
			if ev := cachertest.NextEvent(t, withBookmarks); ev.Type != watch.Added {
				t.Fatalf("got %s, want the initial ADDED", cachertest.Describe(ev))
			}
			sw.Send(t, watch.Modified, cachertest.NewPod("a", 101, map[string]string{"v": "1"}, ""))
			c.waitRV(t, 101)
			for _, w := range []watch.Interface{plain, withBookmarks} {
				if ev := cachertest.NextEvent(t, w); cachertest.EventRV(t, ev) != 101 {
					t.Fatalf("got %s, want @101", cachertest.Describe(ev))
				}
			}
			fs.SetList(300, cachertest.NewPod("a", 250, nil, ""), cachertest.NewPod("b", 300, nil, ""))

			tc.fail(t, sw)
			if tc.wantRelist {
				// The reflector backs off on the config clock before relisting.
				cachertest.Poll(t, "the reflector to back off", func() bool { return !c.Ready() && c.clk.Waiters() == cacheTimers+1 })
				c.clk.Step(time.Second)
			}
			sw2, opts2 := fs.WaitWatch(t, 2)
			if !sw.IsStopped() {
				t.Errorf("the failed storage watch was not stopped")
			}

			if !tc.wantRelist {
				if opts2.ResourceVersion != "101" {
					t.Errorf("storage watch resumed from RV %q, want 101 (the last applied)", opts2.ResourceVersion)
				}
				if n := fs.ListCount(); n != 1 {
					t.Errorf("GetList called %d times, want 1: the watch resumes without a relist", n)
				}
				if !c.Ready() {
					t.Errorf("not ready after a resumed watch")
				}
				sw2.Send(t, watch.Modified, cachertest.NewPod("a", 102, map[string]string{"v": "2"}, ""))
				for _, w := range []watch.Interface{plain, withBookmarks} {
					if ev := cachertest.NextEvent(t, w); cachertest.EventRV(t, ev) != 102 {
						t.Fatalf("after the resumed watch: got %s, want @102", cachertest.Describe(ev))
					}
				}
				return
			}

			// fs.waitWatch(2) returned: the relist is done and the cache is ready
			// at the new RV.
			if n := fs.ListCount(); n != 2 {
				t.Errorf("GetList called %d times, want 2", n)
			}
			if opts2.ResourceVersion != "300" {
				t.Errorf("storage watch reopened at RV %q, want 300 (the relist's)", opts2.ResourceVersion)
			}
			for name, w := range map[string]watch.Interface{"plain": plain, "bookmarks": withBookmarks} {
				if rest := cachertest.DrainUntilClosed(t, w); len(rest) != 0 {
					t.Errorf("%s watcher: %d events after the storage watch failed, want none", name, len(rest))
				}
			}
			c.waitReady(t)
			if got := c.state.CurrentRV(); got != 300 {
				t.Errorf("cache RV %d after the relist, want 300", got)
			}
			w := c.startWatch(t, context.Background(), "0", cachertest.Everything(false))
			for _, want := range []string{"a@250", "b@300"} {
				ev := cachertest.NextEvent(t, w)
				m, _ := meta.Accessor(ev.Object)
				if got := m.GetName() + "@" + m.GetResourceVersion(); ev.Type != watch.Added || got != want {
					t.Fatalf("after the relist: got %s, want ADDED %s", cachertest.Describe(ev), want)
				}
			}
			// The history starts over at the relist: older RVs are gone.
			old := c.startWatch(t, context.Background(), "101", cachertest.Everything(false))
			if s := cachertest.ErrorStatus(t, cachertest.NextEvent(t, old)); s.Code != 410 {
				t.Errorf("watch from 101 after the relist at 300: status %d, want 410", s.Code)
			}
		})
	}
}

// Between the failure and the relist (a backoff on the config clock), the
// cache is not ready and says so.
func TestNotReadyWhileRelisting(t *testing.T) {
	fs := cachertest.NewFakeStorage(100, cachertest.NewPod("a", 100, nil, ""))
	c := newTestCacher(t, fs, nil)
	c.waitReady(t)
	sw, _ := fs.WaitWatch(t, 1)
	w := c.startWatch(t, context.Background(), "100", cachertest.Everything(false))
	fs.SetList(300)
	fs.FailLists(1)
	sw.SendError(t, &apierrors.NewResourceExpired("compacted").ErrStatus)

	cachertest.Poll(t, "the reflector to back off", func() bool { return !c.Ready() && c.clk.Waiters() == cacheTimers+1 })
	cachertest.DrainUntilClosed(t, w)
	c.clk.Step(time.Second)
	cachertest.Poll(t, "the relist to fail and back off", func() bool { return fs.ListCount() == 2 && c.clk.Waiters() == cacheTimers+1 })
	if c.Ready() {
		t.Fatalf("Ready() = true while relisting")
	}
	if err := c.ReadinessCheck(); err == nil {
		t.Errorf("ReadinessCheck() = nil while relisting")
	}
	if _, err := c.Watch(context.Background(), "/pods/", storage.ListOptions{ResourceVersion: "100", Recursive: true, Predicate: cachertest.Everything(false)}); !apierrors.IsTooManyRequests(err) {
		t.Errorf("Watch while relisting = %v, want 429", err)
	}
	c.clk.Step(time.Second)
	c.waitReady(t)
	if _, opts := fs.WaitWatch(t, 2); opts.ResourceVersion != "300" {
		t.Errorf("storage watch reopened at %q, want 300", opts.ResourceVersion)
	}
}

// --- 9. Stop and goroutines ---

func TestStop(t *testing.T) {
	fs := cachertest.NewFakeStorage(100, cachertest.NewPod("a", 100, map[string]string{"app": "web"}, "n1"))
	c := newTestCacher(t, fs, func(cfg *Config) { cfg.BookmarkFrequency = 5 * time.Second })
	c.waitReady(t)
	deadlineCtx, cancel := context.WithDeadline(context.Background(), c.clk.Now().Add(time.Hour))
	defer cancel()
	watchers := map[string]watch.Interface{
		"from 0":    c.startWatch(t, context.Background(), "0", cachertest.Everything(false)),
		"bookmarks": c.startWatch(t, context.Background(), "100", cachertest.Everything(true)),
		"selector":  c.startWatch(t, context.Background(), "100", cachertest.WebPods()),
		"deadline":  c.startWatch(t, deadlineCtx, "100", cachertest.Everything(true)),
		"unread":    c.startWatch(t, context.Background(), "0", cachertest.Everything(false)),
		"field sel.": c.startWatch(t, context.Background(), "100", func() storage.SelectionPredicate {
			p := cachertest.Everything(false)
			p.Field = fields.OneTermEqualSelector("spec.nodeName", "n1")
			return p
		}()),
	}
	if ev := cachertest.NextEvent(t, watchers["from 0"]); ev.Type != watch.Added {
		t.Fatalf("got %s, want the initial ADDED", cachertest.Describe(ev))
	}

	c.stopWithin(t, "watchers still open", nil)
	for name, w := range watchers {
		t.Logf("draining the %q watcher", name)
		cachertest.DrainUntilClosed(t, w)
	}
	expectNoCacherGoroutines(t)
	c.Stop() // twice is fine

	if c.Ready() {
		t.Errorf("Ready() = true after Stop")
	}
	if err := c.ReadinessCheck(); err == nil {
		t.Errorf("ReadinessCheck() = nil after Stop")
	}
	if w, err := c.Watch(context.Background(), "/pods/", storage.ListOptions{ResourceVersion: "0", Recursive: true, Predicate: cachertest.Everything(false)}); err == nil {
		t.Errorf("Watch after Stop returned a watch")
		w.Stop()
	}
	ctx, cancelWait := context.WithTimeout(context.Background(), cachertest.WaitFor)
	defer cancelWait()
	if err := c.WaitReady(ctx); err == nil || ctx.Err() != nil {
		t.Errorf("WaitReady after Stop = %v (ctx %v), want an immediate error", err, ctx.Err())
	}
	for _, w := range watchers {
		w.Stop() // after the cacher stopped: fine
	}
}

// A watcher's goroutine ends when its client stops it or its context ends,
// while the cache goes on.
func TestWatcherGoroutinesEnd(t *testing.T) {
	tests := []struct {
		name string
		end  func(w watch.Interface, cancel context.CancelFunc)
	}{
		{name: "Stop", end: func(w watch.Interface, _ context.CancelFunc) { w.Stop() }},
		{name: "context cancelled", end: func(_ watch.Interface, cancel context.CancelFunc) { cancel() }},
		{name: "Stop twice and cancel", end: func(w watch.Interface, cancel context.CancelFunc) { w.Stop(); w.Stop(); cancel() }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := cachertest.NewFakeStorage(100, cachertest.NewPod("a", 100, nil, ""))
			c := newTestCacher(t, fs, nil)
			c.waitReady(t)
			sw, _ := fs.WaitWatch(t, 1)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			w := c.startWatch(t, ctx, "0", cachertest.Everything(true))
			// More events than the client's channel holds and nobody
			// reading: a pump goroutine runs for the rest when the watch
			// ends.
			for i := range hub.ResultBuffer + 5 {
				sw.Send(t, watch.Modified, cachertest.NewPod("a", uint64(101+i), map[string]string{"i": strconv.Itoa(i)}, ""))
			}
			cachertest.Poll(t, "a pump to run for the queued events", func() bool { return pumps() > 0 })
			// Ending the watch ends the pump although nobody reads any
			// more, as when an HTTP client goes away.
			tc.end(w, cancel)
			expectNoWatcherGoroutines(t)
			cachertest.DrainUntilClosed(t, w)
			// The cache still serves: events flow to a new watcher.
			next := uint64(101 + hub.ResultBuffer + 5)
			c.waitRV(t, next-1)
			w2 := c.startWatch(t, context.Background(), strconv.FormatUint(next-1, 10), cachertest.Everything(false))
			sw.Send(t, watch.Modified, cachertest.NewPod("a", next, nil, ""))
			if ev := cachertest.NextEvent(t, w2); cachertest.EventRV(t, ev) != next {
				t.Fatalf("got %s, want @%d", cachertest.Describe(ev), next)
			}
		})
	}
}

// --- WatchList (sendInitialEvents) ---

func TestWatchListInitialEventsAndEndBookmark(t *testing.T) {
	tests := []struct {
		name        string
		rv          string
		sendInitial *bool
		bookmarks   bool
		currentRV   uint64 // etcd's RV, when ahead of the cache's 100
		wantInitial bool
		wantEndRV   uint64 // 0: no end bookmark
	}{
		{name: "consistent (RV unset)", rv: "", sendInitial: ptr.To(true), bookmarks: true, wantInitial: true, wantEndRV: 100},
		{name: "consistent, etcd ahead of the cache", rv: "", sendInitial: ptr.To(true), bookmarks: true, currentRV: 150, wantInitial: true, wantEndRV: 150},
		{name: "any state (RV 0)", rv: "0", sendInitial: ptr.To(true), bookmarks: true, wantInitial: true, wantEndRV: 100},
		{name: "exact RV", rv: "100", sendInitial: ptr.To(true), bookmarks: true, wantInitial: true, wantEndRV: 100},
		{name: "legacy RV 0 watch", rv: "0", sendInitial: nil, bookmarks: true, wantInitial: true},
		{name: "sendInitialEvents=false, RV 0", rv: "0", sendInitial: ptr.To(false), bookmarks: true},
		{name: "sendInitialEvents=false, RV unset", rv: "", sendInitial: ptr.To(false), bookmarks: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := cachertest.NewFakeStorage(100, cachertest.NewPod("b", 60, nil, ""), cachertest.NewPod("a", 50, nil, ""))
			c := newTestCacher(t, fs, nil)
			c.waitReady(t)
			sw, _ := fs.WaitWatch(t, 1)
			liveRV := uint64(101)
			if tc.currentRV > 0 {
				fs.SetCurrentRV(tc.currentRV)
				liveRV = tc.currentRV + 1
			}

			done := watchAsync(c, "/pods/", storage.ListOptions{
				ResourceVersion: tc.rv, SendInitialEvents: tc.sendInitial, Recursive: true, Predicate: cachertest.Everything(tc.bookmarks),
			})
			if tc.currentRV > 0 {
				// The watch waits for the cache to reach etcd's RV, and asks
				// etcd for progress; the progress notification gets it there.
				cachertest.Poll(t, "a progress request", func() bool { return fs.ProgressCount() >= 1 })
				sw.SendBookmark(t, tc.currentRV)
			}
			var r watchResult
			select {
			case r = <-done:
			case <-time.After(cachertest.WaitFor):
				t.Fatalf("Watch did not return within %v", cachertest.WaitFor)
			}
			if r.err != nil {
				t.Fatalf("Watch: %v", r.err)
			}
			defer r.w.Stop()

			if tc.wantInitial {
				for _, want := range []string{"a@50", "b@60"} {
					ev := cachertest.NextEvent(t, r.w)
					m, _ := meta.Accessor(ev.Object)
					if got := m.GetName() + "@" + m.GetResourceVersion(); ev.Type != watch.Added || got != want {
						t.Fatalf("initial event: %s, want ADDED %s (in key order)", cachertest.Describe(ev), want)
					}
				}
			}
			if tc.wantEndRV > 0 {
				ev := cachertest.NextEvent(t, r.w)
				marked, _ := storage.HasInitialEventsEndBookmarkAnnotation(ev.Object)
				if ev.Type != watch.Bookmark || !marked || cachertest.EventRV(t, ev) != tc.wantEndRV {
					t.Fatalf("after the initial events: %s (marked %v), want the initial-events-end bookmark at %d", cachertest.Describe(ev), marked, tc.wantEndRV)
				}
			}
			sw.Send(t, watch.Modified, cachertest.NewPod("a", liveRV, map[string]string{"v": "1"}, ""))
			if ev := cachertest.NextEvent(t, r.w); ev.Type != watch.Modified || cachertest.EventRV(t, ev) != liveRV {
				t.Fatalf("first live event: %s, want MODIFIED a@%d", cachertest.Describe(ev), liveRV)
			}
		})
	}
}

// EndWatches ends every client watch after what is queued for it, and the
// cache keeps serving: new watches start and hear new events.
func TestEndWatchesDrainsAndKeepsTheCache(t *testing.T) {
	fs := cachertest.NewFakeStorage(100, cachertest.NewPod("a", 100, nil, ""))
	c := newTestCacher(t, fs, nil)
	c.waitReady(t)
	sw, _ := fs.WaitWatch(t, 1)
	ws := []*hub.Watcher{
		c.startWatch(t, context.Background(), "100", cachertest.Everything(false)).(*hub.Watcher),
		c.startWatch(t, context.Background(), "100", cachertest.Everything(true)).(*hub.Watcher),
	}
	// More events than the client's channel holds: the rest wait in the
	// watcher's queue, behind a client that reads nothing yet. Those, not
	// only what sits in the channel, must reach the client before the close.
	const events = hub.ResultBuffer + 5
	for i := 1; i <= events; i++ {
		sw.Send(t, watch.Modified, cachertest.NewPod("a", uint64(100+i), map[string]string{"v": fmt.Sprint(i)}, ""))
	}
	cachertest.Poll(t, "both watchers to have a full channel and the rest queued", func() bool {
		for _, w := range ws {
			inChan, queued := w.Pending()
			if inChan != hub.ResultBuffer || queued != events-hub.ResultBuffer {
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
		for _, ev := range cachertest.DrainUntilClosed(t, w) {
			rvs = append(rvs, cachertest.EventRV(t, ev))
		}
		if diff := cmp.Diff(cachertest.Seq(101, 100+events), rvs); diff != "" {
			t.Errorf("watch %d: events before the close (-want +got):\n%s", i, diff)
		}
	}
	if !c.Ready() {
		t.Fatal("not ready after EndWatches")
	}
	w := c.startWatch(t, context.Background(), fmt.Sprint(100+events), cachertest.Everything(false))
	sw.Send(t, watch.Modified, cachertest.NewPod("a", 200, map[string]string{"v": "last"}, ""))
	if ev := cachertest.NextEvent(t, w); cachertest.EventRV(t, ev) != 200 {
		t.Fatalf("a watch after EndWatches: got %s, want @200", cachertest.Describe(ev))
	}
	if n := c.EndWatches(); n != 1 {
		t.Errorf("second EndWatches ended %d, want 1", n)
	}
}

// A watcher closed by its client stays filed on the bookmark calendar until
// its slot comes up (up to the 1m default frequency), but must let go of
// its request at once: the request's context, and all a real request
// hangs off it, must be collectable while the watcher waits in its slot.
func TestClosedWatcherLetsGoOfItsRequest(t *testing.T) {
	fs := cachertest.NewFakeStorage(100, cachertest.NewPod("a", 100, nil, ""))
	c := newTestCacher(t, fs, func(cfg *Config) { cfg.BookmarkFrequency = time.Minute })
	c.waitReady(t)
	fs.WaitWatch(t, 1)

	ref, w := func() (weak.Pointer[[1 << 16]byte], interface{ Stop() }) {
		payload := new([1 << 16]byte)
		ctx, cancel := context.WithCancel(context.WithValue(context.Background(), payloadKey{}, payload))
		_ = cancel // the client ends the watch with Stop, not by cancelling
		w := c.startWatch(t, ctx, "0", cachertest.Everything(true))
		if ev := cachertest.NextEvent(t, w); cachertest.EventRV(t, ev) != 100 {
			t.Fatalf("got %s, want the initial a@100", cachertest.Describe(ev))
		}
		return weak.Make(payload), w
	}()
	w.Stop()
	filed := c.hub.CalendarLen()
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

// payloadKey carries a test payload in a request context.
type payloadKey struct{}
