package cacher

import (
	"fmt"
	"math/rand/v2"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apisharding "k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/sharding"
	"k8s.io/apiserver/pkg/storage"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
)

// shardPred is a predicate selecting everything of the shard expr names.
func shardPred(t testing.TB, expr string) storage.SelectionPredicate {
	t.Helper()
	sel, err := sharding.Parse(expr)
	if err != nil {
		t.Fatal(err)
	}
	pred := storage.Everything
	pred.ShardSelector = sel
	return pred
}

// shardRange is the selector of n equal ranges' i-th.
func shardRange(field string, i, n int) string {
	span := ^uint64(0)/uint64(n) + 1
	end := fmt.Sprintf("'0x%016x'", uint64(i+1)*span)
	if i == n-1 {
		end = "'0x10000000000000000'"
	}
	return fmt.Sprintf("shardRange(%s, '0x%016x', %s)", field, uint64(i)*span, end)
}

// shardPod is a pod with a UUID-shaped UID drawn from its name, so the
// UIDs' hashes spread over the whole space as real ones do (FNV-1a's top
// bits hardly move for strings alike but in their last characters).
func shardPod(name, namespace string) *object {
	r := rand.New(rand.NewPCG(fnv64a(namespace), fnv64a(name)))
	uid := fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", r.Uint32(), r.Uint32()&0xffff, r.Uint32()&0xffff, r.Uint32()&0xffff, r.Uint64()&0xffffffffffff)
	pod := &example.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, UID: types.UID(uid)}}
	return &object{key: "/pods/" + namespace + "/" + name, obj: pod}
}

// The compiled filter selects exactly what upstream's selector does, for
// both shard fields, one range or several, and the top of the hash space.
func TestShardFilterAgreesWithUpstreamsSelector(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.ShardedListAndWatch, true)
	var objs []*object
	for i := range 500 {
		objs = append(objs, shardPod(fmt.Sprintf("p%d", i), fmt.Sprintf("ns%d", i%37)))
	}
	exprs := []string{
		shardRange(shardFieldUID, 0, 1),
		shardRange(shardFieldUID, 0, 2), shardRange(shardFieldUID, 1, 2),
		shardRange(shardFieldUID, 3, 7), shardRange(shardFieldUID, 6, 7),
		shardRange(shardFieldNamespace, 2, 5),
		shardRange(shardFieldUID, 0, 4) + " || " + shardRange(shardFieldUID, 2, 4),
		"shardRange(object.metadata.uid, '0xfffffffffffffff0', '0x10000000000000000')",
	}
	for _, expr := range exprs {
		pred := shardPred(t, expr)
		f, err := newShardFilter(pred)
		if err != nil || f == nil {
			t.Fatalf("%s: filter %v, %v", expr, f, err)
		}
		for _, o := range objs {
			want, err := pred.ShardSelector.Matches(o.obj)
			if err != nil {
				t.Fatal(err)
			}
			if got := f.selects(o); got != want {
				t.Fatalf("%s: %s selected %v, upstream's selector %v", expr, o.key, got, want)
			}
			if got := matches(pred, o); got != want {
				t.Fatalf("%s: matches(%s) = %v, upstream's selector %v", expr, o.key, got, want)
			}
			if got := matcherFor(pred)(o); got != want {
				t.Fatalf("%s: matcherFor(%s) = %v, upstream's selector %v", expr, o.key, got, want)
			}
		}
	}
	for _, s := range []string{"", "a", "0a4c1d7e-4f2b-4c5e-9b1a-2f7e3d6c8b90", "kube-system"} {
		if got, want := fmt.Sprintf("%016x", fnv64a(s)), apisharding.HashField(s); got != want {
			t.Errorf("fnv64a(%q) = %s, apimachinery's HashField %s", s, got, want)
		}
	}
}

// With the gate off a shard selector is ignored, as upstream's predicate
// ignores it: no filter, and matches selects everything.
func TestShardSelectorIgnoredWithTheGateOff(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.ShardedListAndWatch, false)
	pred := shardPred(t, shardRange(shardFieldUID, 0, 2))
	if f, err := newShardFilter(pred); f != nil || err != nil {
		t.Fatalf("gate off: filter %v, %v; want none", f, err)
	}
	o := shardPod("a", "ns")
	if !matches(pred, o) {
		t.Fatal("gate off: a shard selector filtered an object")
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
	var ws []*watcher
	add := func(key, expr string) {
		w := &watcher{key: key, recursive: true}
		var err error
		if w.shard, err = newShardFilter(shardPred(t, expr)); err != nil {
			t.Fatal(err)
		}
		s.add(w, matchSignature(w))
		ws = append(ws, w)
	}
	for i := range shards {
		add("/pods/", shardRange(shardFieldUID, i, shards))
	}
	for i := range 3 {
		add("/pods/ns1/", shardRange(shardFieldNamespace, i, 3))
	}
	add("/pods/", shardRange(shardFieldUID, 0, 2)+" || "+shardRange(shardFieldUID, 1, 2))
	plain := &watcher{key: "/pods/", recursive: true}
	s.add(plain, matchSignature(plain))

	check := func(step int) {
		for i := range 300 {
			o := shardPod(fmt.Sprintf("p%d", i), []string{"ns1", "ns2"}[i%2])
			got, filtered := s.candidatesAndShardFiltered(nil, &event{cur: o})
			seen := map[*watcher]bool{}
			for _, w := range got {
				if seen[w] {
					t.Fatalf("step %d: %s: a watcher comes twice", step, o.key)
				}
				seen[w] = true
			}
			sharded, in := 0, 0
			for _, w := range ws {
				if !s.has(w) || !(o.key[:len(w.key)] == w.key) {
					continue
				}
				sharded++
				want := w.shard.selects(o)
				if want {
					in++
				}
				if seen[w] != want {
					t.Fatalf("step %d: %s: sharded watcher on %s %v is a candidate: %v, its shard holds the object: %v", step, o.key, w.key, w.shard.text, seen[w], want)
				}
			}
			if s.has(plain) != seen[plain] {
				t.Fatalf("step %d: the unsharded watcher is a candidate: %v", step, seen[plain])
			}
			if filtered != sharded-in {
				t.Fatalf("step %d: %s: %d filtered, want %d", step, o.key, filtered, sharded-in)
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

// Two watches alike but for their shard are two match classes: the
// dispatcher's per-class memo must not hand one the other's selection.
func TestShardIsPartOfTheMatchSignature(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.ShardedListAndWatch, true)
	a := &watcher{key: "/pods/", recursive: true}
	b := &watcher{key: "/pods/", recursive: true}
	b.shard, _ = newShardFilter(shardPred(t, shardRange(shardFieldUID, 0, 2)))
	if matchSignature(a) == matchSignature(b) {
		t.Fatal("a sharded and an unsharded watch share a match class")
	}
}
