package storagebench

import (
	"fmt"
	"math"
	"math/big"
	"regexp"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apisharding "k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/sharding"
)

// The ranges cover the hash space without gap or overlap, from 0 to 2^64,
// and are the ones apimachinery's NewShardRangeSelector gives the same shard
// of the same count: what kube-state-metrics' shards would ask for.
func TestShardRangesSplitTheHashSpace(t *testing.T) {
	for _, n := range []int{1, 2, 3, 7, 16, 64, 100} {
		ranges := shardRanges(n)
		if len(ranges) != n {
			t.Fatalf("shardRanges(%d) has %d ranges", n, len(ranges))
		}
		if ranges[0].start != 0 || !ranges[n-1].last {
			t.Errorf("n=%d: first starts at %#x, last is last: %v; want 0 and true", n, ranges[0].start, ranges[n-1].last)
		}
		space := new(big.Int).Lsh(big.NewInt(1), 64)
		for i, r := range ranges {
			if i < n-1 && (r.last || r.end != ranges[i+1].start) {
				t.Errorf("n=%d: range %d ends at %#x (last %v), the next starts at %#x", n, i, r.end, r.last, ranges[i+1].start)
			}
			want := new(big.Int).Div(new(big.Int).Mul(space, big.NewInt(int64(i))), big.NewInt(int64(n)))
			if want.Uint64() != r.start {
				t.Errorf("n=%d: range %d starts at %#x, want floor(i*2^64/n) = %#x", n, i, r.start, want)
			}
			theirs, err := apisharding.NewShardRangeSelector(shardField, i, n)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.selector(); got != theirs.String() {
				t.Errorf("n=%d: range %d is %s, apimachinery's %s", n, i, got, theirs)
			}
		}
	}
	if shardRanges(0) != nil {
		t.Error("shardRanges(0) is not empty")
	}
}

// shardOf, contains and the apiserver's parsed selector agree on every
// object's shard, and the edges of the ranges fall on the right side.
func TestShardOfAgreesWithTheApiserversSelector(t *testing.T) {
	const n = 16
	ranges := shardRanges(n)
	selectors := make([]apisharding.Selector, n)
	for i, r := range ranges {
		sel, err := sharding.Parse(r.selector())
		if err != nil {
			t.Fatalf("range %d: %v", i, err)
		}
		selectors[i] = sel
	}
	counts := make([]int, n)
	for i := range 2000 {
		pod := &example.Pod{ObjectMeta: metav1.ObjectMeta{Name: shardedName(i), UID: shardedUID(shardedSeed, i)}}
		h := uidHash(pod.UID)
		s := shardOf(ranges, h)
		counts[s]++
		for j, sel := range selectors {
			ok, err := sel.Matches(pod)
			if err != nil {
				t.Fatal(err)
			}
			if ok != (j == s) || ranges[j].contains(h) != (j == s) {
				t.Fatalf("UID %s (hash %#x): shardOf %d, selector %d matches %v, contains %v", pod.UID, h, s, j, ok, ranges[j].contains(h))
			}
		}
	}
	for i, c := range counts {
		// 125 expected; random UIDs spread evenly.
		if c < 60 || c > 200 {
			t.Errorf("shard %d holds %d of 2000 objects: the UIDs do not spread", i, c)
		}
	}
	for i, r := range ranges {
		if got := shardOf(ranges, r.start); got != i {
			t.Errorf("the start of range %d is in %d", i, got)
		}
		if i > 0 && shardOf(ranges, r.start-1) != i-1 {
			t.Errorf("the hash before range %d is not in %d", i, i-1)
		}
	}
	if got := shardOf(ranges, math.MaxUint64); got != n-1 {
		t.Errorf("the largest hash is in %d, want %d", got, n-1)
	}
}

// uidHash is apimachinery's hash of the field.
func TestUIDHashIsFNV1a64(t *testing.T) {
	for _, uid := range []types.UID{"", "a", shardedUID(1, 2)} {
		if got, want := uidHash(uid), apisharding.HashField(string(uid)); formatHash(got) != want {
			t.Errorf("uidHash(%q) = %s, apimachinery %s", uid, formatHash(got), want)
		}
	}
	// FNV-1a 64 of "a" (the reference test vector).
	if got := uidHash("a"); got != 0xaf63dc4c8601ec8c {
		t.Errorf("uidHash(a) = %#x", got)
	}
}

func formatHash(h uint64) string { return fmt.Sprintf("%016x", h) }

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// The UIDs look like the apiserver's (random UUIDs), are the same for the
// same seed and object, and differ otherwise.
func TestShardedUIDs(t *testing.T) {
	seen := map[types.UID]bool{}
	for i := range 1000 {
		u := shardedUID(shardedSeed, i)
		if !uuidV4.MatchString(string(u)) {
			t.Fatalf("UID %q is not a version 4 UUID", u)
		}
		if u != shardedUID(shardedSeed, i) {
			t.Fatalf("UID %d differs from one call to the next", i)
		}
		if seen[u] {
			t.Fatalf("UID %q twice", u)
		}
		seen[u] = true
	}
	if shardedUID(1, 0) == shardedUID(2, 0) {
		t.Error("two seeds give the same UID")
	}
	if p := shardedPod(shardedSeed, 3); p.UID != shardedUID(shardedSeed, 3) || p.Name != "shard-3" {
		t.Errorf("shardedPod(3) is %s with UID %s", p.Name, p.UID)
	}
}

// countShards' arithmetic: each watcher's shortfall is missing, its excess
// duplicates, whatever came from outside its shard wrong; only a watcher with
// neither is exact.
func TestCountShards(t *testing.T) {
	owed := []int64{3, 0, 5, 2}
	got := counters(3, 0, 4, 3)
	wrong := counters(0, 2, 0, 0)
	c := countShards(owed, got, wrong)
	want := shardCounts{missing: 1, duplicates: 1, wrongShard: 2, exact: 1, minOwed: 0, maxOwed: 5}
	if c != want {
		t.Errorf("countShards = %+v, want %+v", c, want)
	}
	if c := countShards(owed, counters(3, 0, 5, 2), counters(0, 0, 0, 0)); c.exact != 4 || c.missing+c.duplicates+c.wrongShard != 0 {
		t.Errorf("every watcher with its shard: %+v", c)
	}
}

func counters(vs ...int64) []atomic.Int64 {
	cs := make([]atomic.Int64, len(vs))
	for i, v := range vs {
		cs[i].Store(v)
	}
	return cs
}
