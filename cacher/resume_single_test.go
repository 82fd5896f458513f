package cacher

import (
	"testing"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"
)

// A watch of one object resuming from before the cache's list needs no
// backfill when that object was, at the list, as it was at the resume's
// RV; it waits for one when the object changed in the gap, may have been
// deleted in it, or the watch can see more than one object. Each case
// resumes from 95 on a cache that listed at 100: a@90, b@97.
func TestResumeOfOneUnchangedObjectNeedsNoBackfill(t *testing.T) {
	named := func(name string) storage.SelectionPredicate {
		p := cachertest.Everything(false)
		p.Field = fields.OneTermEqualSelector("metadata.name", name)
		return p
	}
	ns := "/pods/" + cachertest.Namespace + "/"
	for _, tc := range []struct {
		name      string
		key       string
		recursive bool
		pred      storage.SelectionPredicate
		// aChanged: a is written at 101 after the list, before the resume.
		aChanged     bool
		wantBackfill bool
	}{
		{"the key of a, unchanged since 90", ns + "a", false, cachertest.Everything(false), false, false},
		{"its namespace narrowed to the name a", ns, true, named("a"), false, false},
		{"a, written after the list: the history tells the rest", ns + "a", false, cachertest.Everything(false), true, false},
		{"every namespace narrowed to a: more than one object", "/pods/", true, named("a"), false, true},
		{"b, written at 97 in the gap", ns + "b", false, cachertest.Everything(false), false, true},
		{"gone: not held, may have been deleted in the gap", ns + "gone", false, cachertest.Everything(false), false, true},
		{"the namespace narrowed to gone", ns, true, named("gone"), false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := cachertest.NewFakeStorage(100, cachertest.NewPod("a", 90, nil, ""), cachertest.NewPod("b", 97, nil, ""))
			c := newTestCacher(t, fs, nil)
			c.waitReady(t)
			sw, _ := fs.WaitWatch(t, 1)
			if tc.aChanged {
				sw.Send(t, watch.Modified, cachertest.NewPod("a", 101, map[string]string{"v": "101"}, ""))
				cachertest.Poll(t, "the cache to apply a@101", func() bool { return c.state.CurrentRV() >= 101 })
			}
			fs.SetList(95, cachertest.NewPod("a", 90, nil, ""))

			done := watchAsync(c, tc.key, storage.ListOptions{ResourceVersion: "95", Recursive: tc.recursive, Predicate: tc.pred})
			if tc.wantBackfill {
				bw, opts := fs.WaitWatch(t, 2)
				if opts.ResourceVersion != "95" {
					t.Fatalf("backfill from %q, want 95", opts.ResourceVersion)
				}
				bw.SendBookmark(t, 100)
			}
			r := <-done
			if r.err != nil {
				t.Fatal(r.err)
			}
			t.Cleanup(r.w.Stop)
			if !tc.wantBackfill && fs.WatchCount() != 1 {
				t.Fatalf("the resume backfilled (%d etcd watches), want none", fs.WatchCount()-1)
			}
			if tc.wantBackfill {
				return
			}
			// It resumed, not 410: the next change of a reaches it, after
			// the one the history holds.
			if tc.aChanged {
				if ev := cachertest.NextEvent(t, r.w); ev.Type != watch.Modified || cachertest.EventRV(t, ev) != 101 {
					t.Fatalf("first event %s, want MODIFIED a@101 from the history", cachertest.Describe(ev))
				}
			}
			sw.Send(t, watch.Modified, cachertest.NewPod("a", 102, nil, ""))
			if ev := cachertest.NextEvent(t, r.w); ev.Type != watch.Modified || cachertest.EventRV(t, ev) != 102 {
				t.Fatalf("got %s, want MODIFIED a@102", cachertest.Describe(ev))
			}
		})
	}
}
