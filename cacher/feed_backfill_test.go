package cacher

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/errors"
	v1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"
	utilflowcontrol "k8s.io/apiserver/pkg/util/flowcontrol"
	compbasemetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"
	"github.com/watchkeeper/watchkeeper/cacher/internal/feed"
)

// cacherListedAt100 is a ready cacher that listed pod a@97 at RV 100, over
// a fake etcd whose state at RV 90 (a@90) a backfill reads, and the cache's
// own storage watch.
func cacherListedAt100(t *testing.T) (*cachertest.FakeStorage, *testCacher, *cachertest.FakeWatch) {
	t.Helper()
	fs := cachertest.NewFakeStorage(100, cachertest.NewPod("a", 97, nil, ""))
	c := newTestCacher(t, fs, nil)
	c.waitReady(t)
	sw, _ := fs.WaitWatch(t, 1)
	fs.SetList(90, cachertest.NewPod("a", 90, nil, ""))
	return fs, c, sw
}

// A client resuming from an RV before the cache's list (its apiserver
// restarted, or the cache relisted) continues from etcd's events instead of
// getting 410; when etcd no longer has that RV it gets the 410.
func TestBackfillBeforeTheList(t *testing.T) {
	a90 := cachertest.NewPod("a", 90, map[string]string{"app": "web"}, "")
	fs := cachertest.NewFakeStorage(100, cachertest.NewPod("a", 97, map[string]string{"app": "db"}, ""), cachertest.NewPod("b", 99, nil, ""))
	c := newTestCacher(t, fs, nil)
	c.waitReady(t)
	sw, _ := fs.WaitWatch(t, 1)
	// etcd's state at 90: a is still web, b does not exist yet.
	fs.SetList(90, a90)

	web := cachertest.WebPods()
	done := watchAsync(c, "/pods/", storage.ListOptions{ResourceVersion: "90", Recursive: true, Predicate: web})
	bw, opts := fs.WaitWatch(t, 2)
	if opts.ResourceVersion != "90" {
		t.Fatalf("backfill watch from %q, want 90", opts.ResourceVersion)
	}
	bw.Send(t, watch.Modified, cachertest.NewPod("a", 97, map[string]string{"app": "db"}, "")) // a leaves app=web
	bw.Send(t, watch.Added, cachertest.NewPod("b", 99, nil, ""))
	bw.SendBookmark(t, 100)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(r.w.Stop)
	// The selector saw a leave: a DELETED of the old a at 97.
	ev := cachertest.NextEvent(t, r.w)
	if ev.Type != watch.Deleted || cachertest.EventRV(t, ev) != 97 {
		t.Fatalf("first event %s, want DELETED a@97 (it left the selector)", cachertest.Describe(ev))
	}
	sw.Send(t, watch.Modified, cachertest.NewPod("a", 101, map[string]string{"app": "web"}, ""))
	if ev := cachertest.NextEvent(t, r.w); ev.Type != watch.Added || cachertest.EventRV(t, ev) != 101 {
		t.Fatalf("then %s, want ADDED a@101", cachertest.Describe(ev))
	}
	start, fromList := c.state.HistoryStart()
	if start != 90 || !fromList {
		t.Errorf("history starts at %d (fromList %v), want 90", start, fromList)
	}

	// etcd compacted 80 away: its watch from there fails and the resume
	// gets 410.
	done = watchAsync(c, "/pods/", storage.ListOptions{ResourceVersion: "80", Recursive: true, Predicate: web})
	bw, _ = fs.WaitWatch(t, 3)
	bw.Send(t, watch.Error, &errors.NewResourceExpired("compacted").ErrStatus)
	r = <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(r.w.Stop)
	ev = cachertest.NextEvent(t, r.w)
	if s := cachertest.ErrorStatus(t, ev); s.Code != 410 || s.Reason != v1.StatusReasonExpired {
		t.Fatalf("resume from 80 after a failed backfill: %+v, want 410 Expired", s)
	}
}

// Resumes from before the list share the backfill: while one runs, the
// others wait without listing etcd, and those that need older RVs are taken
// by one next run from the oldest of them. A resume whose context ends
// stops waiting at once; the backfill goes on for the others.
func TestBackfillsAreCoalesced(t *testing.T) {
	fs, c, sw := cacherListedAt100(t)
	listsBefore := fs.ListCount()

	type result struct {
		rv  uint64
		w   watch.Interface
		err error
	}
	results := make(chan result, 20)
	resume := func(ctx context.Context, rv uint64) {
		w, err := c.Watch(ctx, "/pods/", storage.ListOptions{ResourceVersion: strconv.FormatUint(rv, 10), Recursive: true, Predicate: cachertest.Everything(false)})
		results <- result{rv, w, err}
	}
	// The first resume starts a backfill from 90, which blocks on its etcd
	// watch until the test sends it events.
	go resume(context.Background(), 90)
	run1, opts := fs.WaitWatch(t, 2)
	if opts.ResourceVersion != "90" {
		t.Fatalf("first backfill from %q, want 90", opts.ResourceVersion)
	}
	// Nine more, from 80 to 88, and one whose client goes away.
	for rv := uint64(80); rv <= 88; rv++ {
		go resume(context.Background(), rv)
	}
	gone, cancel := context.WithCancel(context.Background())
	go resume(gone, 85)
	cancel()
	select {
	case r := <-results:
		if r.rv != 85 {
			t.Fatalf("resume from %d returned while the backfill runs", r.rv)
		}
		if r.err == nil {
			r.w.Stop()
		}
	case <-time.After(cachertest.WaitFor):
		t.Fatal("a resume whose context ended still waits for the backfill")
	}
	cachertest.Poll(t, "the nine resumes to wait for the backfill", func() bool {
		_, waiting := c.feed.BackfillState()
		return waiting == 10 // the first and the nine
	})
	// One backfill runs: one etcd watch besides the cache's, and no read
	// of etcd's state before its events.
	if n, w := fs.ListCount()-listsBefore, fs.WatchCount(); n != 0 || w != 2 {
		t.Fatalf("%d lists and %d watches of etcd while one backfill waits for its events, want 0 and 2", n, w)
	}

	// The first backfill ends; one more, from 80, serves all nine. (The
	// fake etcd holds one past state: 80's is set once the first read 90's.)
	run1.Send(t, watch.Modified, cachertest.NewPod("a", 97, nil, ""))
	run1.SendBookmark(t, 100)
	run2, opts := fs.WaitWatch(t, 3)
	if opts.ResourceVersion != "80" {
		t.Fatalf("second backfill from %q, want 80 (the oldest asked for)", opts.ResourceVersion)
	}
	fs.SetList(80, cachertest.NewPod("a", 80, nil, ""))
	run2.Send(t, watch.Modified, cachertest.NewPod("a", 85, map[string]string{"v": "85"}, ""))
	run2.Send(t, watch.Modified, cachertest.NewPod("a", 90, nil, ""))
	for range 10 {
		r := <-results
		if r.err != nil {
			t.Fatalf("resume from %d: %v", r.rv, r.err)
		}
		t.Cleanup(r.w.Stop)
		// Each gets the events after its RV: 85 (if after it), 90, 97.
		want := []uint64{90, 97}
		if r.rv < 85 {
			want = []uint64{85, 90, 97}
		}
		if r.rv == 90 {
			want = []uint64{97}
		}
		for _, rv := range want {
			if ev := cachertest.NextEvent(t, r.w); ev.Type == watch.Error || cachertest.EventRV(t, ev) != rv {
				t.Fatalf("resume from %d: got %s, want @%d", r.rv, cachertest.Describe(ev), rv)
			}
		}
	}
	if n := fs.ListCount() - listsBefore; n != 2 {
		t.Errorf("%d lists of etcd for 10 resumes from 80..90, want 2 (one per backfill)", n)
	}
	sw.Send(t, watch.Modified, cachertest.NewPod("a", 101, nil, ""))
}

// A resume waiting for a backfill has told API Priority and Fairness its
// watch is initialized: the wait is no work of its own, and at a restart
// thousands of such waits held every seat of their priority level.
func TestResumeWaitingForABackfillFreesItsAPFSeat(t *testing.T) {
	fs, c, _ := cacherListedAt100(t)

	signal := utilflowcontrol.NewInitializationSignal()
	ctx := utilflowcontrol.WithInitializationSignal(context.Background(), signal)
	done := make(chan error, 1)
	go func() {
		w, err := c.Watch(ctx, "/pods/", storage.ListOptions{ResourceVersion: "90", Recursive: true, Predicate: cachertest.Everything(false)})
		if err == nil {
			w.Stop()
		}
		done <- err
	}()
	// The backfill's etcd watch is open and gets nothing: the resume waits.
	run, _ := fs.WaitWatch(t, 2)
	signaled := make(chan struct{})
	go func() { signal.Wait(); close(signaled) }()
	select {
	case <-signaled:
	case <-time.After(cachertest.WaitFor):
		t.Fatal("the resume holds its APF seat while it waits for the backfill")
	}
	select {
	case err := <-done:
		t.Fatalf("the resume returned (%v) before the backfill ended", err)
	default:
	}
	run.Send(t, watch.Modified, cachertest.NewPod("a", 97, nil, ""))
	run.SendBookmark(t, 100)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A backfill reads etcd's state at the RV only for the objects its events
// modify first, key by key: an ADDED had no state, a DELETED carries it. At
// a restart a read of the whole resource took seconds while every resume
// waited. When most objects changed, one read of the whole resource costs
// less than a read per key.
func TestBackfillReadsTheStateOfTheObjectsItsEventsModify(t *testing.T) {
	web := map[string]string{"app": "web"}
	db := map[string]string{"app": "db"}
	for _, tc := range []struct {
		name      string
		events    []watch.Event
		wantReads []string
		// wantLeave: the selector sees a leave app=web at 97, which only
		// etcd's state at 90 tells.
		wantLeave bool
	}{
		{"a modified, e added, b deleted: a read", []watch.Event{
			{Type: watch.Modified, Object: cachertest.NewPod("a", 97, db, "")},
			{Type: watch.Added, Object: cachertest.NewPod("e", 98, nil, "")},
			{Type: watch.Deleted, Object: cachertest.NewPod("b", 99, nil, "")},
		}, []string{"/pods/" + cachertest.Namespace + "/a"}, true},
		{"a key modified twice is read once", []watch.Event{
			{Type: watch.Modified, Object: cachertest.NewPod("a", 97, db, "")},
			{Type: watch.Modified, Object: cachertest.NewPod("a", 99, db, "")},
		}, []string{"/pods/" + cachertest.Namespace + "/a"}, true},
		{"added, then modified: nothing read", []watch.Event{
			{Type: watch.Added, Object: cachertest.NewPod("e", 97, nil, "")},
			{Type: watch.Modified, Object: cachertest.NewPod("e", 98, web, "")},
		}, nil, false},
		{"three of four modified: the whole resource read", []watch.Event{
			{Type: watch.Modified, Object: cachertest.NewPod("a", 97, db, "")},
			{Type: watch.Modified, Object: cachertest.NewPod("b", 98, nil, "")},
			{Type: watch.Modified, Object: cachertest.NewPod("c", 99, nil, "")},
		}, []string{"/pods/"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			held := []*example.Pod{cachertest.NewPod("a", 97, db, ""), cachertest.NewPod("b", 98, nil, ""), cachertest.NewPod("c", 99, nil, ""), cachertest.NewPod("d", 50, nil, "")}
			fs := cachertest.NewFakeStorage(100, held...)
			c := newTestCacher(t, fs, nil)
			c.waitReady(t)
			fs.WaitWatch(t, 1)
			fs.SetList(90, cachertest.NewPod("a", 90, web, ""), cachertest.NewPod("b", 80, nil, ""), cachertest.NewPod("c", 70, nil, ""), cachertest.NewPod("d", 50, nil, ""))
			readsBefore := len(fs.ReadKeys())

			done := watchAsync(c, "/pods/", storage.ListOptions{ResourceVersion: "90", Recursive: true, Predicate: cachertest.WebPods()})
			run, _ := fs.WaitWatch(t, 2)
			for _, ev := range tc.events {
				run.Send(t, ev.Type, ev.Object)
			}
			run.SendBookmark(t, 100)
			r := <-done
			if r.err != nil {
				t.Fatal(r.err)
			}
			t.Cleanup(r.w.Stop)
			got := fs.ReadKeys()[readsBefore:]
			if slices.Equal(tc.wantReads, []string{"/pods/"}) {
				// The keys' reads start as their events come and may
				// have run before the third showed they were too many;
				// the whole resource is read once, last.
				if len(got) == 0 || got[len(got)-1] != "/pods/" || slices.Index(got, "/pods/") != len(got)-1 || len(got) > 3 {
					t.Fatalf("the backfill read %q of etcd, want at most two keys, then the whole resource once", got)
				}
			} else if !slices.Equal(got, tc.wantReads) {
				t.Fatalf("the backfill read %q of etcd, want %q", got, tc.wantReads)
			}
			ev := cachertest.NextEvent(t, r.w)
			switch {
			case tc.wantLeave && (ev.Type != watch.Deleted || cachertest.EventRV(t, ev) != 97):
				t.Fatalf("first event %s, want DELETED a@97 (it left the selector)", cachertest.Describe(ev))
			case !tc.wantLeave && (ev.Type != watch.Added || cachertest.EventRV(t, ev) != 98):
				t.Fatalf("first event %s, want ADDED e@98 (it joined the selector)", cachertest.Describe(ev))
			}
		})
	}
}

// When a backfill's events show most objects modified it reads the whole
// resource instead of key by key; the key reads already in flight finish
// rather than being cancelled: etcd's client logs every cancelled call at
// WARN, and a restarted kube-apiserver on watchkeeper logged about 100 of
// them at 300 nodes (docs/kube-load.md).
func TestBackfillSwitchingToTheWholeResourceLetsKeyReadsFinish(t *testing.T) {
	db := map[string]string{"app": "db"}
	fs := cachertest.NewFakeStorage(100, cachertest.NewPod("a", 97, db, ""), cachertest.NewPod("b", 98, nil, ""), cachertest.NewPod("c", 99, nil, ""), cachertest.NewPod("d", 50, nil, ""))
	c := newTestCacher(t, fs, nil)
	c.waitReady(t)
	fs.WaitWatch(t, 1)
	fs.SetList(90, cachertest.NewPod("a", 90, map[string]string{"app": "web"}, ""), cachertest.NewPod("b", 80, nil, ""), cachertest.NewPod("c", 70, nil, ""), cachertest.NewPod("d", 50, nil, ""))
	gate := make(chan struct{})
	fs.Mu.Lock()
	fs.KeyGate = gate
	fs.Mu.Unlock()

	done := watchAsync(c, "/pods/", storage.ListOptions{ResourceVersion: "90", Recursive: true, Predicate: cachertest.WebPods()})
	run, _ := fs.WaitWatch(t, 2)
	run.Send(t, watch.Modified, cachertest.NewPod("a", 97, db, ""))
	run.Send(t, watch.Modified, cachertest.NewPod("b", 98, nil, ""))
	cachertest.Poll(t, "a's and b's reads held", func() bool { return len(fs.Held()) == 2 })
	// The third of four objects modified: the whole resource is read.
	run.Send(t, watch.Modified, cachertest.NewPod("c", 99, nil, ""))
	run.SendBookmark(t, 100)
	cachertest.Poll(t, "the backfill to take every event", func() bool { return len(run.Ch) == 0 })
	for i, ctx := range fs.Held() {
		if ctx.Err() != nil {
			t.Errorf("key read %d in flight: %v, want it left to finish", i, ctx.Err())
		}
	}
	close(gate)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(r.w.Stop)
	if ev := cachertest.NextEvent(t, r.w); ev.Type != watch.Deleted || cachertest.EventRV(t, ev) != 97 {
		t.Fatalf("first event %s, want DELETED a@97 (it left the selector)", cachertest.Describe(ev))
	}
}

// After a backfill fails, resumes from before the list get their 410 at
// once for a while instead of each starting a backfill that would fail the
// same way and wait up to backfillTimeout first; after it, they try again.
func TestFailedBackfillAnswersResumesAtOnceForACooldown(t *testing.T) {
	fs, c, _ := cacherListedAt100(t)
	resume := func() *v1.Status {
		t.Helper()
		w, err := c.Watch(context.Background(), "/pods/", storage.ListOptions{ResourceVersion: "90", Recursive: true, Predicate: cachertest.Everything(false)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		ev := cachertest.NextEvent(t, w)
		if ev.Type != watch.Error {
			return nil
		}
		return cachertest.ErrorStatus(t, ev)
	}

	// The series are shared by every test's cacher of pods: count deltas.
	count := func(m compbasemetrics.CounterMetric) float64 {
		v, err := testutil.GetCounterMetricValue(m)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	failed, filled := count(c.metrics.BackfillFailed), count(c.metrics.Backfilled)

	// etcd fails the backfill's state read, after its events: 410, and
	// one failure counted.
	fs.FailLists(1)
	lists := fs.ListCount()
	failing := make(chan *v1.Status, 1)
	go func() { failing <- resume() }()
	run, _ := fs.WaitWatch(t, 2)
	run.Send(t, watch.Modified, cachertest.NewPod("a", 97, nil, ""))
	run.SendBookmark(t, 100)
	if s := <-failing; s == nil || s.Code != 410 {
		t.Fatalf("resume after a failed backfill: %+v, want 410", s)
	}
	if n := fs.ListCount() - lists; n != 1 {
		t.Fatalf("%d reads of etcd for the failed backfill, want 1", n)
	}
	if got := count(c.metrics.BackfillFailed) - failed; got != 1 {
		t.Errorf("failed backfills counted %v, want 1", got)
	}

	// Within the cooldown: 410 at once, no backfill, no read of etcd.
	c.clk.Step(feed.BackfillCooldown - time.Second)
	watches := fs.WatchCount()
	if s := resume(); s == nil || s.Code != 410 {
		t.Fatalf("resume within the cooldown: %+v, want 410", s)
	}
	if fs.ListCount() != lists+1 || fs.WatchCount() != watches {
		t.Fatalf("a resume within the cooldown started a backfill (%d lists, %d watches of etcd)", fs.ListCount()-lists-1, fs.WatchCount()-watches)
	}

	// After it, a resume backfills again, and this one fills.
	c.clk.Step(time.Second)
	done := make(chan *v1.Status, 1)
	go func() { done <- resume() }()
	run, _ = fs.WaitWatch(t, watches+1)
	run.Send(t, watch.Modified, cachertest.NewPod("a", 97, nil, ""))
	run.SendBookmark(t, 100)
	if s := <-done; s != nil {
		t.Fatalf("resume after the cooldown: %+v, want the events", s)
	}
	if got := count(c.metrics.Backfilled) - filled; got != 1 {
		t.Errorf("filled backfills counted %v, want 1", got)
	}
}

// listedWithBackfill is a cacher that listed a@97 at RV 100 and reads its
// history back 30 revisions after the list, and that backfill's etcd
// watch, told apart from the cache's own by the RV it starts from.
func listedWithBackfill(t *testing.T) (*cachertest.FakeStorage, *testCacher, *cachertest.FakeWatch) {
	t.Helper()
	fs := cachertest.NewFakeStorage(100, cachertest.NewPod("a", 97, nil, ""))
	c := newTestCacher(t, fs, func(cfg *Config) { cfg.ListBackfillRevisions = 30 })
	c.waitReady(t)
	// The two watches open concurrently, in either order.
	w1, o1 := fs.WaitWatch(t, 1)
	w2, o2 := fs.WaitWatch(t, 2)
	if o1.ResourceVersion == "70" {
		w1, o1, w2, o2 = w2, o2, w1, o1
	}
	if o1.ResourceVersion != "100" || o2.ResourceVersion != "70" {
		t.Fatalf("storage watches from %q and %q, want the cache's from 100 and the backfill's from 70", o1.ResourceVersion, o2.ResourceVersion)
	}
	return fs, c, w2
}

// A list reads the history back before any client asks: a client resuming
// from before the list then gets its events from memory, with no read of
// etcd of its own.
func TestListBackfillsTheHistoryBeforeAnyResume(t *testing.T) {
	fs, c, bw := listedWithBackfill(t)
	fs.SetList(70, cachertest.NewPod("a", 60, nil, "")) // etcd's state at 70
	bw.Send(t, watch.Modified, cachertest.NewPod("a", 97, nil, ""))
	bw.SendBookmark(t, 100)
	deadline := time.Now().Add(cachertest.WaitFor)
	for {
		if start, _ := c.state.HistoryStart(); start == 70 {
			break
		}
		if time.Now().After(deadline) {
			start, _ := c.state.HistoryStart()
			t.Fatalf("history starts at %d, want 70: the backfill after the list did not land", start)
		}
		time.Sleep(time.Millisecond)
	}
	watches, lists := fs.WatchCount(), fs.ListCount()
	// The backfilled a@97 is the version the list read: one object for
	// both, not two decoded copies.
	c.state.Read(func() {
		events, _ := c.state.AfterLocked(70)
		for e := range events {
			if e.RV == 97 && e.Cur != c.state.Peek(e.Cur.Key) {
				t.Errorf("the backfilled a@97 holds a copy of the listed a@97, not the state's object")
			}
		}
	})

	w, err := c.Watch(context.Background(), "/pods/", storage.ListOptions{ResourceVersion: "80", Recursive: true, Predicate: cachertest.Everything(false)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	if ev := cachertest.NextEvent(t, w); ev.Type != watch.Modified || cachertest.EventRV(t, ev) != 97 {
		t.Fatalf("resume from 80: %s, want MODIFIED a@97", cachertest.Describe(ev))
	}
	if fs.WatchCount() != watches || fs.ListCount() != lists {
		t.Errorf("the resume read etcd (%d watches, %d lists), want none", fs.WatchCount()-watches, fs.ListCount()-lists)
	}
}

// A backfill after the list that fails (etcd compacted its start away)
// leaves no cooldown: no client was waiting for it, and a resume from a
// younger RV backfills on demand.
func TestFailedListBackfillLeavesResumesTheirOwn(t *testing.T) {
	fs, c, bw := listedWithBackfill(t)
	bw.Send(t, watch.Error, &v1.Status{Status: v1.StatusFailure, Code: 410, Reason: v1.StatusReasonExpired, Message: "compacted"})
	deadline := time.Now().Add(cachertest.WaitFor)
	for {
		running, _ := c.feed.BackfillState()
		if !running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the backfill after the list did not end on etcd's error")
		}
		time.Sleep(time.Millisecond)
	}

	fs.SetList(90, cachertest.NewPod("a", 90, nil, ""))
	done := watchAsync(c, "/pods/", storage.ListOptions{ResourceVersion: "90", Recursive: true, Predicate: cachertest.Everything(false)})
	run, opts := fs.WaitWatch(t, 3)
	if opts.ResourceVersion != "90" {
		t.Fatalf("the resume's backfill watches from %q, want 90", opts.ResourceVersion)
	}
	run.Send(t, watch.Modified, cachertest.NewPod("a", 97, nil, ""))
	run.SendBookmark(t, 100)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(r.w.Stop)
	if ev := cachertest.NextEvent(t, r.w); ev.Type != watch.Modified || cachertest.EventRV(t, ev) != 97 {
		t.Fatalf("resume from 90 after the list's backfill failed: %s, want MODIFIED a@97", cachertest.Describe(ev))
	}
}

// A resume further behind the cache than BackfillMaxRevisions gets its 410
// at once, with no etcd watch from its RV (etcd would read every revision
// since under its read lock) and a too_far counted; one within reach is
// backfilled.
func TestResumeTooFarBehindIsNotBackfilled(t *testing.T) {
	fs := cachertest.NewFakeStorage(100, cachertest.NewPod("a", 97, nil, ""))
	c := newTestCacher(t, fs, func(cfg *Config) { cfg.BackfillMaxRevisions = 8 })
	c.waitReady(t)
	fs.WaitWatch(t, 1)
	fs.SetList(92, cachertest.NewPod("a", 90, nil, ""))
	tooFar, err := testutil.GetCounterMetricValue(c.metrics.BackfillTooFar)
	if err != nil {
		t.Fatal(err)
	}
	resume := func(rv string) watch.Interface {
		t.Helper()
		w, err := c.Watch(context.Background(), "/pods/", storage.ListOptions{ResourceVersion: rv, Recursive: true, Predicate: cachertest.Everything(false)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		return w
	}

	// 10 revisions behind the cache's 100: 410, no backfill.
	watches, lists := fs.WatchCount(), fs.ListCount()
	if s := cachertest.ErrorStatus(t, cachertest.NextEvent(t, resume("90"))); s.Code != 410 {
		t.Fatalf("resume 10 revisions behind: %+v, want 410", s)
	}
	if fs.WatchCount() != watches || fs.ListCount() != lists {
		t.Fatalf("a resume beyond reach read etcd (%d watches, %d lists)", fs.WatchCount()-watches, fs.ListCount()-lists)
	}
	if v, _ := testutil.GetCounterMetricValue(c.metrics.BackfillTooFar); v-tooFar != 1 {
		t.Errorf("too_far counted %v, want 1", v-tooFar)
	}

	// 8 behind: backfilled from etcd.
	done := make(chan watch.Interface, 1)
	go func() { done <- resume("92") }()
	bw, opts := fs.WaitWatch(t, watches+1)
	if opts.ResourceVersion != "92" {
		t.Fatalf("backfill watch from %q, want 92", opts.ResourceVersion)
	}
	bw.Send(t, watch.Modified, cachertest.NewPod("a", 97, nil, ""))
	bw.SendBookmark(t, 100)
	if ev := cachertest.NextEvent(t, <-done); ev.Type != watch.Modified || cachertest.EventRV(t, ev) != 97 {
		t.Fatalf("resume 8 behind: %s, want MODIFIED a@97", cachertest.Describe(ev))
	}
}

// The key reads of every backfill of the process share one bound: two
// caches resuming at once, each with more keys to read than the bound,
// have no more than it in flight together (60 resources resuming at once
// once sent etcd 5,700 reads together, and every other read waited).
func TestBackfillKeyReadsAreBoundedAcrossCaches(t *testing.T) {
	const keys = 100 // each cache's; two of them exceed feed's bound of 128
	type resumed struct {
		fs   *cachertest.FakeStorage
		done <-chan watchResult
	}
	var all []resumed
	var caches []*testCacher
	gate := make(chan struct{})
	for range 2 {
		var pods []*example.Pod
		for i := range 3 * keys {
			pods = append(pods, cachertest.NewPod("p"+strconv.Itoa(i), 10, nil, ""))
		}
		fs := cachertest.NewFakeStorage(1000, pods...)
		c := newTestCacher(t, fs, nil)
		caches = append(caches, c)
		c.waitReady(t)
		fs.WaitWatch(t, 1)
		fs.SetList(500, pods...)
		fs.Mu.Lock()
		fs.KeyGate = gate
		fs.Mu.Unlock()
		done := watchAsync(c, "/pods/", storage.ListOptions{ResourceVersion: "500", Recursive: true, Predicate: cachertest.Everything(false)})
		run, _ := fs.WaitWatch(t, 2)
		for i := range keys {
			run.Send(t, watch.Modified, cachertest.NewPod("p"+strconv.Itoa(i), uint64(501+i), nil, ""))
		}
		run.SendBookmark(t, 1000)
		all = append(all, resumed{fs, done})
	}
	// Each cacher's cleanup checks that no cacher goroutine is left: both
	// stop first, their held reads let go (should the test fail).
	var release sync.Once
	open := func() { release.Do(func() { close(gate) }) }
	t.Cleanup(func() {
		open()
		for _, c := range caches {
			c.Stop()
		}
	})
	held := func() int { return len(all[0].fs.Held()) + len(all[1].fs.Held()) }
	cachertest.Poll(t, "the key reads to fill the bound", func() bool { return held() >= 128 })
	// Every key is pending by now; none past the bound starts.
	time.Sleep(100 * time.Millisecond)
	if n := held(); n != 128 {
		t.Fatalf("%d key reads in flight across the two caches, want the bound of 128", n)
	}
	open()
	for _, r := range all {
		res := <-r.done
		if res.err != nil {
			t.Fatal(res.err)
		}
		t.Cleanup(res.w.Stop)
		if ev := cachertest.NextEvent(t, res.w); ev.Type != watch.Modified || cachertest.EventRV(t, ev) != 501 {
			t.Fatalf("first event %s, want MODIFIED p0@501", cachertest.Describe(ev))
		}
	}
	if n := held(); n != 2*keys {
		t.Errorf("%d keys read, want %d", n, 2*keys)
	}
}
