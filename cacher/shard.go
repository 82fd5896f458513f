package cacher

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage"
)

// Sharded list and watch (KEP-5866, gate ShardedListAndWatch): a request's
// shard selector keeps the objects whose shard key (metadata.uid or
// metadata.namespace) hashes, by 64-bit FNV-1a, into one of its half-open
// ranges. Label and field selection come first, then the shard, as
// upstream's. A shard key never changes over an object's life, so an
// update never moves an object between shards: each event belongs to one
// shard, and the dispatcher files sharded watchers by the ranges they hold
// (shardBuckets) so an event is matched only against its shard's watchers.

// The shard key fields the API accepts (k8s.io/apiserver/pkg/sharding).
const (
	shardFieldUID       = "object.metadata.uid"
	shardFieldNamespace = "object.metadata.namespace"
)

// shardFilter is a request's shard selector compiled once: the field it
// hashes and its ranges, sorted, as numbers.
type shardFilter struct {
	field  string
	ranges []hashRange
	// text is the selector as the client wrote it, for the match class.
	text string
}

// hashRange selects the hashes in [lo, hi), or [lo, 2^64) when toEnd.
type hashRange struct {
	lo, hi uint64
	toEnd  bool
}

func (r hashRange) contains(h uint64) bool { return h >= r.lo && (r.toEnd || h < r.hi) }

// lastHash is the highest hash r selects; ok is false for an empty range.
func (r hashRange) lastHash() (uint64, bool) {
	if r.toEnd {
		return math.MaxUint64, true
	}
	if r.hi <= r.lo {
		return 0, false
	}
	return r.hi - 1, true
}

// newShardFilter compiles pred's shard selector, nil when the request is
// not sharded (no selector, or the gate off: then the selector is ignored,
// as upstream's SelectionPredicate ignores it).
func newShardFilter(pred storage.SelectionPredicate) (*shardFilter, error) {
	if !pred.ShardingEnabled() {
		return nil, nil
	}
	reqs := pred.ShardSelector.Requirements()
	f := &shardFilter{text: pred.ShardSelector.String()}
	for _, req := range reqs {
		if f.field != "" && req.Key != f.field {
			return nil, fmt.Errorf("shard selector %q: ranges over two fields, %q and %q", f.text, f.field, req.Key)
		}
		f.field = req.Key
		lo, loToEnd, err := parseHashBound(req.Start)
		if err != nil || loToEnd {
			return nil, fmt.Errorf("shard selector %q: start %q is not a 64-bit hash", f.text, req.Start)
		}
		hi, toEnd, err := parseHashBound(req.End)
		if err != nil {
			return nil, fmt.Errorf("shard selector %q: end %q: %w", f.text, req.End, err)
		}
		f.ranges = append(f.ranges, hashRange{lo: lo, hi: hi, toEnd: toEnd})
	}
	slices.SortFunc(f.ranges, func(a, b hashRange) int { return cmp.Compare(a.lo, b.lo) })
	return f, nil
}

// parseHashBound reads a range bound as the API writes it: "0x" and 16 hex
// digits, or "0x10000000000000000" (2^64, the end of the hash space).
func parseHashBound(s string) (v uint64, toEnd bool, err error) {
	hex, ok := strings.CutPrefix(s, "0x")
	if !ok {
		return 0, false, fmt.Errorf("no 0x prefix")
	}
	if hex == "10000000000000000" {
		return 0, true, nil
	}
	v, err = strconv.ParseUint(hex, 16, 64)
	return v, false, err
}

// contains reports whether a shard key hashing to h is in the shard.
func (f *shardFilter) contains(h uint64) bool {
	for _, r := range f.ranges {
		if r.contains(h) {
			return true
		}
	}
	return false
}

// selects reports whether o is in the shard; nil selects everything.
func (f *shardFilter) selects(o *object) bool {
	if f == nil {
		return true
	}
	h, ok := shardHash(o.obj, f.field)
	return ok && f.contains(h)
}

// shardHash is the hash of obj's shard key field, the way apimachinery's
// sharding.HashField computes it, without its string formatting.
func shardHash(obj runtime.Object, field string) (uint64, bool) {
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return 0, false
	}
	switch field {
	case shardFieldUID:
		return fnv64a(string(accessor.GetUID())), true
	case shardFieldNamespace:
		return fnv64a(accessor.GetNamespace()), true
	}
	return 0, false
}

func fnv64a(s string) uint64 {
	const offset64, prime64 = 14695981039346656037, 1099511628211
	h := uint64(offset64)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= prime64
	}
	return h
}
