package cacher

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// An event's candidates are the watchers filed under its key, under a
// prefix of its key, or under its trigger values: never a watcher of
// another key or namespace, and none twice.
func TestWatcherSetCandidates(t *testing.T) {
	named := map[*watcher]string{}
	mk := func(name, key string, recursive bool, trigger string) *watcher {
		w := &watcher{key: key, recursive: recursive, triggerValue: trigger, triggered: trigger != ""}
		named[w] = name
		return w
	}
	s := newWatcherSet()
	for _, w := range []*watcher{
		mk("all pods", "/pods/", true, ""),
		mk("namespace ns1", "/pods/ns1/", true, ""),
		mk("namespace ns2", "/pods/ns2/", true, ""),
		mk("ns1/a by name", "/pods/ns1/a", false, ""),
		mk("ns1/b by name", "/pods/ns1/b", false, ""),
		mk("ns1/ab by name", "/pods/ns1/ab", false, ""),
		mk("node-1", "/pods/", true, "node-1"),
		mk("node-2", "/pods/", true, "node-2"),
	} {
		s.add(w, matchSignature(w))
	}
	names := func(e *event) string {
		var out []string
		for _, w := range s.candidates(nil, e) {
			out = append(out, named[w])
		}
		slices.Sort(out)
		return strings.Join(out, ", ")
	}
	a := &object{key: "/pods/ns1/a"}
	for _, tc := range []struct {
		e    *event
		want string
	}{
		{&event{cur: a, curTrigger: "node-1", prevTrigger: "node-1"}, "all pods, namespace ns1, node-1, ns1/a by name"},
		// Moved from node-1 to node-2: both hear of it.
		{&event{cur: a, curTrigger: "node-2", prevTrigger: "node-1"}, "all pods, namespace ns1, node-1, node-2, ns1/a by name"},
		// A delete carries the object as prev.
		{&event{prev: &object{key: "/pods/ns2/z"}, curTrigger: "", prevTrigger: ""}, "all pods, namespace ns2"},
	} {
		if got := names(tc.e); got != tc.want {
			t.Errorf("candidates of %s: %s; want %s", describeKey(tc.e), got, tc.want)
		}
	}
	// Removing empties the index.
	for w := range named {
		s.remove(w)
	}
	if len(s.all)+len(s.byKey)+len(s.byPrefix)+len(s.byValue) != 0 {
		t.Errorf("after removing every watcher: %d all, %d keys, %d prefixes, %d values", len(s.all), len(s.byKey), len(s.byPrefix), len(s.byValue))
	}
}

func describeKey(e *event) string {
	if e.cur != nil {
		return e.cur.key
	}
	return fmt.Sprintf("deleted %s", e.prev.key)
}

// Watchers leave their list in any order, each taking only itself out: the
// last on the list takes the leaver's place, and a list that held a crowd
// gives its array back once most have gone.
func TestWatcherSetRemoveInAnyOrder(t *testing.T) {
	const n = 200
	s := newWatcherSet()
	open := map[*watcher]bool{}
	var ws []*watcher
	for i := range n {
		w := &watcher{key: "/pods/", recursive: true}
		if i%4 == 0 { // some on a key of their own list
			w = &watcher{key: "/pods/ns1/a"}
		}
		s.add(w, matchSignature(w))
		open[w] = true
		ws = append(ws, w)
	}
	e := &event{cur: &object{key: "/pods/ns1/a"}}
	for step, i := range rand.New(rand.NewPCG(1, 2)).Perm(n) {
		s.remove(ws[i])
		delete(open, ws[i])
		got := s.candidates(nil, e)
		seen := map[*watcher]bool{}
		for _, w := range got {
			if !open[w] || seen[w] {
				t.Fatalf("after %d removals: candidate %p is closed or comes twice", step+1, w)
			}
			seen[w] = true
		}
		if len(seen) != len(open) {
			t.Fatalf("after %d removals: %d candidates, want the %d open", step+1, len(seen), len(open))
		}
		if l := s.byPrefix["/pods/"]; len(l) > 0 && len(l) < 16 && cap(l) > 64 {
			t.Fatalf("after %d removals: %d watchers keep an array of %d", step+1, len(l), cap(l))
		}
	}
	if len(s.all)+len(s.byKey)+len(s.byPrefix)+len(s.byValue) != 0 {
		t.Errorf("after removing every watcher: %d all, %d keys, %d prefixes, %d values", len(s.all), len(s.byKey), len(s.byPrefix), len(s.byValue))
	}
}
