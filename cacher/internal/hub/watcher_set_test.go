package hub

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"
	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
)

// An event's candidates are the watchers filed under its key, under a
// prefix of its key, or under its trigger values: never a watcher of
// another key or namespace, and none twice.
func TestWatcherSetCandidates(t *testing.T) {
	named := map[*Watcher]string{}
	mk := func(name, key string, recursive bool, trigger string) *Watcher {
		w := &Watcher{Key: key, Recursive: recursive, TriggerValue: trigger, Triggered: trigger != ""}
		named[w] = name
		return w
	}
	s := newWatcherSet()
	for _, w := range []*Watcher{
		mk("all pods", "/pods/", true, ""),
		mk("namespace ns1", "/pods/ns1/", true, ""),
		mk("namespace ns2", "/pods/ns2/", true, ""),
		mk("ns1/a by name", "/pods/ns1/a", false, ""),
		mk("ns1/b by name", "/pods/ns1/b", false, ""),
		mk("ns1/ab by name", "/pods/ns1/ab", false, ""),
		mk("node-1", "/pods/", true, "node-1"),
		mk("node-2", "/pods/", true, "node-2"),
	} {
		s.add(w, MatchSignature(w))
	}
	names := func(e *objects.Event) string {
		var out []string
		for _, w := range s.candidates(nil, e) {
			out = append(out, named[w])
		}
		slices.Sort(out)
		return strings.Join(out, ", ")
	}
	a := &objects.Object{Key: "/pods/ns1/a"}
	for _, tc := range []struct {
		e    *objects.Event
		want string
	}{
		{&objects.Event{Cur: a, CurTrigger: "node-1", PrevTrigger: "node-1"}, "all pods, namespace ns1, node-1, ns1/a by name"},
		// Moved from node-1 to node-2: both hear of it.
		{&objects.Event{Cur: a, CurTrigger: "node-2", PrevTrigger: "node-1"}, "all pods, namespace ns1, node-1, node-2, ns1/a by name"},
		// A delete carries the object as prev.
		{&objects.Event{Prev: &objects.Object{Key: "/pods/ns2/z"}, CurTrigger: "", PrevTrigger: ""}, "all pods, namespace ns2"},
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

func describeKey(e *objects.Event) string {
	if e.Cur != nil {
		return e.Cur.Key
	}
	return fmt.Sprintf("deleted %s", e.Prev.Key)
}

// Watchers leave their list in any order, each taking only itself out: the
// last on the list takes the leaver's place, and a list that held a crowd
// gives its array back once most have gone.
func TestWatcherSetRemoveInAnyOrder(t *testing.T) {
	const n = 200
	s := newWatcherSet()
	open := map[*Watcher]bool{}
	var ws []*Watcher
	for i := range n {
		w := &Watcher{Key: "/pods/", Recursive: true}
		if i%4 == 0 { // some on a key of their own list
			w = &Watcher{Key: "/pods/ns1/a"}
		}
		s.add(w, MatchSignature(w))
		open[w] = true
		ws = append(ws, w)
	}
	e := &objects.Event{Cur: &objects.Object{Key: "/pods/ns1/a"}}
	for step, i := range rand.New(rand.NewPCG(1, 2)).Perm(n) {
		s.remove(ws[i])
		delete(open, ws[i])
		got := s.candidates(nil, e)
		seen := map[*Watcher]bool{}
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

// Sharded watchers are filed by the buckets of their ranges: an event's
// candidates are exactly the sharded watchers of its prefixes whose shard
// holds it (never one twice), the others are counted as filtered, and the
// index empties as they leave, in any order.
func TestWatcherSetFilesShardedWatchersByRange(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.ShardedListAndWatch, true)
	const shards = 16
	s := newWatcherSet()
	var ws []*Watcher
	add := func(key, expr string) {
		w := &Watcher{Key: key, Recursive: true}
		var err error
		if w.Shard, err = objects.NewShardFilter(cachertest.ShardPred(t, expr)); err != nil {
			t.Fatal(err)
		}
		s.add(w, MatchSignature(w))
		ws = append(ws, w)
	}
	for i := range shards {
		add("/pods/", cachertest.ShardRange(objects.ShardFieldUID, i, shards))
	}
	for i := range 3 {
		add("/pods/ns1/", cachertest.ShardRange(objects.ShardFieldNamespace, i, 3))
	}
	add("/pods/", cachertest.ShardRange(objects.ShardFieldUID, 0, 2)+" || "+cachertest.ShardRange(objects.ShardFieldUID, 1, 2))
	plain := &Watcher{Key: "/pods/", Recursive: true}
	s.add(plain, MatchSignature(plain))

	check := func(step int) {
		for i := range 300 {
			name, ns := fmt.Sprintf("p%d", i), []string{"ns1", "ns2"}[i%2]
			o := objects.NewDecoded("/pods/"+ns+"/"+name, cachertest.ShardPod(name, ns), nil, nil)
			got, filtered := s.candidatesAndShardFiltered(nil, &objects.Event{Cur: o})
			seen := map[*Watcher]bool{}
			for _, w := range got {
				if seen[w] {
					t.Fatalf("step %d: %s: a watcher comes twice", step, o.Key)
				}
				seen[w] = true
			}
			sharded, in := 0, 0
			for _, w := range ws {
				if !s.has(w) || !(o.Key[:len(w.Key)] == w.Key) {
					continue
				}
				sharded++
				want := w.Shard.Selects(o)
				if want {
					in++
				}
				if seen[w] != want {
					t.Fatalf("step %d: %s: sharded watcher on %s %v is a candidate: %v, its shard holds the object: %v", step, o.Key, w.Key, w.Shard.Text, seen[w], want)
				}
			}
			if s.has(plain) != seen[plain] {
				t.Fatalf("step %d: the unsharded watcher is a candidate: %v", step, seen[plain])
			}
			if filtered != sharded-in {
				t.Fatalf("step %d: %s: %d filtered, want %d", step, o.Key, filtered, sharded-in)
			}
		}
	}
	check(0)
	for step, i := range rand.New(rand.NewPCG(3, 4)).Perm(len(ws)) {
		s.remove(ws[i])
		check(step + 1)
	}
	if len(s.byShard) != 0 || len(s.shardFields) != 0 {
		t.Errorf("after removing every sharded watcher: %d shard indexes, %d fields", len(s.byShard), len(s.shardFields))
	}
}
