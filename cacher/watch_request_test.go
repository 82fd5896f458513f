package cacher

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/utils/ptr"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"
	"github.com/watchkeeper/watchkeeper/internal/fixtures"
)

// blockingSelector selects as its Selector does, but its first Matches waits
// until released: it holds a watch's initial state half built.
type blockingSelector struct {
	labels.Selector
	entered, release chan struct{}
	once             sync.Once
}

func (s *blockingSelector) Empty() bool { return false }
func (s *blockingSelector) Matches(l labels.Labels) bool {
	s.once.Do(func() {
		close(s.entered)
		<-s.release
	})
	return s.Selector.Matches(l)
}

// A watch from the state builds it outside the cache's exclusive lock: while
// it is half built the reflector goes on applying events. The client still
// gets one state, at one RV, as ADDED events (KEP-3157: the initial events
// are ADDED, and a WatchList's end bookmark closes them at that RV), with
// the changes applied meanwhile folded in: an update replaces its object's
// ADDED, a deletion or a move out of the selector drops it, a creation or a
// move into the selector adds one. Only changes after that RV follow.
// Upstream (cache_watcher.go processInterval) sends the same.
func TestWatchFromStateFoldsChangesWhileTheStateIsBuilt(t *testing.T) {
	// in is a pod the watch selects (labelled app=web, on node n1), out one
	// it does not.
	in := func(name string, rv uint64) *example.Pod {
		return cachertest.NewPod(name, rv, map[string]string{"app": "web", "rv": strconv.FormatUint(rv, 10)}, "n1")
	}
	out := func(name string, rv uint64) *example.Pod {
		return cachertest.NewPod(name, rv, map[string]string{"app": "db"}, "n2")
	}
	// block makes a selector's first match wait (blockingSelector).
	type block func(labels.Selector) labels.Selector
	byLabel := func(block block) storage.SelectionPredicate {
		p := cachertest.Everything(false)
		p.Label = block(labels.SelectorFromSet(labels.Set{"app": "web"}))
		return p
	}
	// A kubelet's WatchList: its node's pods, read from the index.
	byNode := func(block block) storage.SelectionPredicate {
		p := cachertest.Everything(false)
		p.Label = block(labels.Everything())
		p.Field = fields.OneTermEqualSelector("spec.nodeName", "n1")
		p.IndexFields = []string{"spec.nodeName"}
		return p
	}
	for _, tc := range []struct {
		name        string
		sendInitial *bool
		bookmarks   bool
		pred        func(block) storage.SelectionPredicate
	}{
		{"watchlist", ptr.To(true), true, byLabel},
		{"watchlist of a node's pods", ptr.To(true), true, byNode},
		{"watchlist without bookmarks", ptr.To(true), false, byLabel},
		{"watch from rv 0", nil, false, byLabel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := cachertest.NewFakeStorage(100, in("a", 90), in("b", 95), in("c", 98), out("x", 100))
			c := newTestCacher(t, fs, func(cfg *Config) {
				cfg.Indexers = &cache.Indexers{fixtures.NodeNameIndex: fixtures.NodeNameIndexFunc}
			})
			c.waitReady(t)
			sw, _ := fs.WaitWatch(t, 1)
			entered, unblock := make(chan struct{}), make(chan struct{})
			release := sync.OnceFunc(func() { close(unblock) })
			t.Cleanup(release) // before the cacher's Stop: a failed wait must not leave the watch blocked
			pred := tc.pred(func(inner labels.Selector) labels.Selector {
				return &blockingSelector{Selector: inner, entered: entered, release: unblock}
			})
			pred.AllowWatchBookmarks = tc.bookmarks
			done := make(chan watch.Interface, 1)
			go func() {
				w, err := c.Watch(context.Background(), "/pods/", storage.ListOptions{
					ResourceVersion: "0", SendInitialEvents: tc.sendInitial, Recursive: true, Predicate: pred,
				})
				if err != nil {
					t.Errorf("Watch: %v", err)
				}
				done <- w
			}()
			<-entered
			// The state at 100 is being built: the reflector applies changes
			// meanwhile.
			sw.Send(t, watch.Modified, in("a", 101))
			sw.Send(t, watch.Modified, out("b", 102))
			sw.Send(t, watch.Deleted, in("c", 103))
			sw.Send(t, watch.Added, in("d", 104))
			sw.Send(t, watch.Modified, in("x", 105))
			sw.Send(t, watch.Added, in("e", 106))
			sw.Send(t, watch.Deleted, in("e", 107))
			sw.Send(t, watch.Modified, in("a", 108))
			// Wait aside: with a watch that held the lock while building
			// its state, the wait itself would block on it.
			applied := make(chan struct{})
			go func() {
				for c.state.CurrentRV() < 108 {
					time.Sleep(time.Millisecond)
				}
				close(applied)
			}()
			select {
			case <-applied:
			case <-time.After(cachertest.WaitFor):
				release()
				<-applied
				t.Fatalf("the reflector could not apply an event while a watch's initial state was being built")
			}
			release()
			w := <-done
			if w == nil {
				return
			}
			defer w.Stop()
			want := []string{"ADDED a@108", "ADDED d@104", "ADDED x@105"}
			if tc.bookmarks {
				want = append(want, "BOOKMARK @108 end")
			}
			// A live change after the state follows it, and nothing else
			// came between.
			sw.Send(t, watch.Modified, in("d", 109))
			want = append(want, "MODIFIED d@109")
			var got []string
			for len(got) < len(want) {
				got = append(got, shortEvent(t, cachertest.NextEvent(t, w)))
			}
			if strings.Join(got, ", ") != strings.Join(want, ", ") {
				t.Errorf("stream\n  %s\nwant\n  %s", strings.Join(got, ", "), strings.Join(want, ", "))
			}
		})
	}
}

// shortEvent is "TYPE name@rv", or "BOOKMARK @rv" with " end" when it is
// annotated as the end of the initial events.
func shortEvent(t *testing.T, ev watch.Event) string {
	t.Helper()
	m, err := meta.Accessor(ev.Object)
	if err != nil {
		return cachertest.Describe(ev)
	}
	if ev.Type == watch.Bookmark {
		s := "BOOKMARK @" + m.GetResourceVersion()
		if m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
			s += " end"
		}
		return s
	}
	return fmt.Sprintf("%s %s@%s", ev.Type, m.GetName(), m.GetResourceVersion())
}

// A watch from before the history gets a 410 whose message names the
// oldest RV it could have resumed from as upstream's cache names it
// (resumableFromLocked): once events were evicted, the RV just before the
// oldest event held, or the cache's RV when none is held. (While nothing
// was, it is the list's RV, the history's start; a resume from before the
// list first waits for a backfill, so that case is slow to test.)
// Kubernetes' conformance suite (WatchResync) checks the message.
func TestExpiredWatchNamesTheOldestResumableRV(t *testing.T) {
	for _, tc := range []struct {
		name string
		// drop: the history is cut through this RV (0: not cut).
		drop uint64
		// progress: then a progress notification moves the cache's RV.
		progress uint64
		want     uint64
	}{
		// Events at 101, 105 and 106: cut through 101, the history still
		// covers (101, 106], but 105 is the oldest event it holds.
		{name: "events evicted", drop: 101, want: 104},
		{name: "every event evicted", drop: 106, want: 106},
		{name: "every event evicted, the cache's RV moved since", drop: 106, progress: 110, want: 110},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := cachertest.NewFakeStorage(100)
			c := newTestCacher(t, fs, nil)
			c.waitReady(t)
			sw, _ := fs.WaitWatch(t, 1)
			for _, rv := range []uint64{101, 105, 106} {
				sw.Send(t, watch.Added, cachertest.NewPod(cachertest.PodName(int(rv)), rv, nil, ""))
			}
			c.waitRV(t, 106)
			if tc.drop > 0 {
				c.DropHistoryThrough(tc.drop)
			}
			if tc.progress > 0 {
				sw.SendBookmark(t, tc.progress)
				c.waitRV(t, tc.progress)
			}
			w := c.startWatch(t, context.Background(), "50", cachertest.Everything(false))
			s := cachertest.ErrorStatus(t, cachertest.NextEvent(t, w))
			if want := fmt.Sprintf("too old resource version: 50 (%d)", tc.want); s.Code != 410 || s.Message != want {
				t.Errorf("got %d %q, want 410 %q", s.Code, s.Message, want)
			}
		})
	}
}

// A write storm larger than the capacity forces events younger than the
// window out: the metric counts each, and a watch from before them gets 410
// while one from inside what is kept loses nothing.
func TestHistoryCapacityUnderStorm(t *testing.T) {
	fs := cachertest.NewFakeStorage(100)
	c := newTestCacher(t, fs, func(cfg *Config) {
		cfg.EventsHistoryWindow = time.Hour
		cfg.HistoryCapacity = 3
	})
	c.waitReady(t)
	sw, _ := fs.WaitWatch(t, 1)
	before, err := testutil.GetCounterMetricValue(c.metrics.HistoryForcedEvictions)
	if err != nil {
		t.Fatal(err)
	}
	for rv := uint64(101); rv <= 108; rv++ {
		sw.Send(t, watch.Added, cachertest.NewPod(cachertest.PodName(int(rv)), rv, nil, ""))
	}
	c.waitRV(t, 108)

	after, err := testutil.GetCounterMetricValue(c.metrics.HistoryForcedEvictions)
	if err != nil {
		t.Fatal(err)
	}
	if got := after - before; got != 5 {
		t.Errorf("forced evictions counted %v, want 5 (8 events, capacity 3)", got)
	}
	_, _, hi := c.state.Inspect()
	kept, start := hi.Events, hi.StartRV
	if kept != 3 || start != 105 {
		t.Errorf("history keeps %d events from %d, want 3 after 105", kept, start)
	}

	w := c.startWatch(t, context.Background(), "104", cachertest.Everything(false))
	if s := cachertest.ErrorStatus(t, cachertest.NextEvent(t, w)); s.Code != 410 || s.Reason != metav1.StatusReasonExpired {
		t.Errorf("watch from a forced-out RV: status %d %s, want 410 Expired", s.Code, s.Reason)
	}
	w = c.startWatch(t, context.Background(), "105", cachertest.Everything(false))
	for _, want := range []uint64{106, 107, 108} {
		if ev := cachertest.NextEvent(t, w); cachertest.EventRV(t, ev) != want {
			t.Fatalf("got %s, want @%d", cachertest.Describe(ev), want)
		}
	}
}
