package cacher

import (
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"
)

func TestBackfillSegmentsCoverTheGapOnce(t *testing.T) {
	for _, tc := range []struct {
		from, to uint64
		want     int
	}{
		{90, 100, 1},
		{1000, 3000, 1},
		{1000, 3001, 2},
		{114074, 139069, 13},
		{1, 1_000_000, maxBackfillSegments},
	} {
		b := backfillSegments(tc.from, tc.to)
		if len(b)-1 != tc.want || b[0] != tc.from || b[len(b)-1] != tc.to {
			t.Errorf("(%d, %d]: bounds %v, want %d segments from %d to %d", tc.from, tc.to, b, tc.want, tc.from, tc.to)
			continue
		}
		for i := 1; i < len(b); i++ {
			if span := b[i] - b[i-1]; b[i] <= b[i-1] || (tc.want < maxBackfillSegments && span > backfillSegmentRevs) {
				t.Errorf("(%d, %d]: segment (%d, %d] is empty or spans more than %d", tc.from, tc.to, b[i-1], b[i], backfillSegmentRevs)
			}
		}
	}
}

// A resume from 9,000 revisions before the list is backfilled by five
// watches, one from each segment's start, as etcd sends them: every event
// after the start, past the segment's end (here up to the first past it). Each segment keeps its own, the
// one at its end included, and the history has each event once, in order.
// The segments answer last to first, so a key's earliest event arrives
// after its later ones: c's first event (MODIFIED at 2,500) comes after its
// DELETED at 5,000, and still its state at 1,000 must be read, or the
// selector would take c@2500 for an addition.
func TestBackfillReadsALongGapOnSeveralWatches(t *testing.T) {
	web := map[string]string{"app": "web"}
	web2 := map[string]string{"app": "web", "v": "2"}
	db := map[string]string{"app": "db"}
	quiet := []*example.Pod{newTestPod("e", 10, nil, ""), newTestPod("f", 10, nil, ""), newTestPod("g", 10, nil, ""), newTestPod("h", 10, nil, "")}
	held := append([]*example.Pod{newTestPod("a", 7000, db, ""), newTestPod("b", 4600, web2, ""), newTestPod("d", 9000, web, "")}, quiet...)
	fs := newFakeStorage(10000, held...)
	c := newTestCacher(t, fs, nil)
	c.waitReady(t)
	fs.waitWatch(t, 1)
	fs.setList(1000, append([]*example.Pod{newTestPod("a", 900, web, ""), newTestPod("c", 800, web, "")}, quiet...)...)
	readsBefore := len(fs.readKeys())

	gap := []watch.Event{
		{Type: watch.Modified, Object: newTestPod("a", 2000, db, "")}, // a leaves app=web
		{Type: watch.Modified, Object: newTestPod("c", 2500, web2, "")},
		{Type: watch.Added, Object: newTestPod("b", 3000, web, "")},
		{Type: watch.Modified, Object: newTestPod("b", 4600, web2, "")}, // the second segment's last
		{Type: watch.Deleted, Object: newTestPod("c", 5000, web2, "")},
		{Type: watch.Modified, Object: newTestPod("a", 7000, db, "")},
		{Type: watch.Added, Object: newTestPod("d", 9000, web, "")},
	}
	bounds := backfillSegments(1000, 10000)
	if len(bounds) != 6 {
		t.Fatalf("segments %v, want 5 (the test's events are placed for them)", bounds)
	}

	done := watchAsync(c, "/pods/", storage.ListOptions{ResourceVersion: "1000", Recursive: true, Predicate: webPods()})
	watches := map[string]*fakeWatch{}
	for n := 2; n < 2+len(bounds)-1; n++ {
		w, opts := fs.waitWatch(t, n)
		watches[opts.ResourceVersion] = w
	}
	for i := len(bounds) - 2; i >= 0; i-- {
		w := watches[strconv.FormatUint(bounds[i], 10)]
		if w == nil {
			t.Fatalf("no backfill watch from %d (watches from %v)", bounds[i], slices.Sorted(maps.Keys(watches)))
		}
		// As etcd would, up to the first event past the segment's end,
		// which stops its watch; then the next segment's.
		past := false
		for _, ev := range gap {
			if rv := eventRV(t, ev); rv > bounds[i] && !past {
				w.send(t, ev.Type, ev.Object)
				past = rv > bounds[i+1]
			}
		}
		if !past {
			w.sendBookmark(t, 10000)
		}
		select {
		case <-w.stopped:
		case <-time.After(waitFor):
			t.Fatalf("the backfill's watch from %d did not stop at its segment's end, %d", bounds[i], bounds[i+1])
		}
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(r.w.Stop)

	c.state.mu.RLock()
	events, ok := c.state.history.since(1000)
	c.state.mu.RUnlock()
	got := eventRVs(events)
	if !ok {
		t.Fatal("the history does not reach back to 1000 after the backfill")
	}
	if want := []uint64{2000, 2500, 3000, 4600, 5000, 7000, 9000}; !slices.Equal(got, want) {
		t.Fatalf("history after the backfill %v, want %v", got, want)
	}
	if reads := fs.readKeys()[readsBefore:]; !slices.Equal(sorted(reads), []string{"/pods/" + testNamespace + "/a", "/pods/" + testNamespace + "/c"}) {
		t.Fatalf("the backfill read %q of etcd, want a's and c's keys", reads)
	}
	for _, want := range []struct {
		typ watch.EventType
		rv  uint64
	}{{watch.Deleted, 2000}, {watch.Modified, 2500}, {watch.Added, 3000}, {watch.Modified, 4600}, {watch.Deleted, 5000}, {watch.Added, 9000}} {
		if ev := nextEvent(t, r.w); ev.Type != want.typ || eventRV(t, ev) != want.rv {
			t.Fatalf("got %s, want %s at %d", describe(ev), want.typ, want.rv)
		}
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
