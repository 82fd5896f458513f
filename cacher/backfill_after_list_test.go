package cacher

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
)

// listedWithBackfill is a cacher that listed a@97 at RV 100 and reads its
// history back 30 revisions after the list, and that backfill's etcd
// watch, told apart from the cache's own by the RV it starts from.
func listedWithBackfill(t *testing.T) (*fakeStorage, *testCacher, *fakeWatch) {
	t.Helper()
	fs := newFakeStorage(100, newTestPod("a", 97, nil, ""))
	c := newTestCacher(t, fs, func(cfg *Config) { cfg.ListBackfillRevisions = 30 })
	c.waitReady(t)
	// The two watches open concurrently, in either order.
	w1, o1 := fs.waitWatch(t, 1)
	w2, o2 := fs.waitWatch(t, 2)
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
	fs.setList(70, newTestPod("a", 60, nil, "")) // etcd's state at 70
	bw.send(t, watch.Modified, newTestPod("a", 97, nil, ""))
	bw.sendBookmark(t, 100)
	deadline := time.Now().Add(waitFor)
	for {
		if start, _ := c.state.historyStart(); start == 70 {
			break
		}
		if time.Now().After(deadline) {
			start, _ := c.state.historyStart()
			t.Fatalf("history starts at %d, want 70: the backfill after the list did not land", start)
		}
		time.Sleep(time.Millisecond)
	}
	watches, lists := fs.watchCount(), fs.listCount()

	w, err := c.Watch(context.Background(), "/pods/", storage.ListOptions{ResourceVersion: "80", Recursive: true, Predicate: everything(false)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	if ev := nextEvent(t, w); ev.Type != watch.Modified || eventRV(t, ev) != 97 {
		t.Fatalf("resume from 80: %s, want MODIFIED a@97", describe(ev))
	}
	if fs.watchCount() != watches || fs.listCount() != lists {
		t.Errorf("the resume read etcd (%d watches, %d lists), want none", fs.watchCount()-watches, fs.listCount()-lists)
	}
}

// A backfill after the list that fails (etcd compacted its start away)
// leaves no cooldown: no client was waiting for it, and a resume from a
// younger RV backfills on demand.
func TestFailedListBackfillLeavesResumesTheirOwn(t *testing.T) {
	fs, c, bw := listedWithBackfill(t)
	bw.send(t, watch.Error, &v1.Status{Status: v1.StatusFailure, Code: 410, Reason: v1.StatusReasonExpired, Message: "compacted"})
	deadline := time.Now().Add(waitFor)
	for {
		c.backfills.mu.Lock()
		running := c.backfills.running
		c.backfills.mu.Unlock()
		if running == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the backfill after the list did not end on etcd's error")
		}
		time.Sleep(time.Millisecond)
	}

	fs.setList(90, newTestPod("a", 90, nil, ""))
	done := watchAsync(c, "/pods/", storage.ListOptions{ResourceVersion: "90", Recursive: true, Predicate: everything(false)})
	run, opts := fs.waitWatch(t, 3)
	if opts.ResourceVersion != "90" {
		t.Fatalf("the resume's backfill watches from %q, want 90", opts.ResourceVersion)
	}
	run.send(t, watch.Modified, newTestPod("a", 97, nil, ""))
	run.sendBookmark(t, 100)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(r.w.Stop)
	if ev := nextEvent(t, r.w); ev.Type != watch.Modified || eventRV(t, ev) != 97 {
		t.Fatalf("resume from 90 after the list's backfill failed: %s, want MODIFIED a@97", describe(ev))
	}
}
