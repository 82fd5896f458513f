package objects

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
	ShardFieldUID       = "object.metadata.uid"
	ShardFieldNamespace = "object.metadata.namespace"
)

// ShardFilter is a request's shard selector compiled once: the field it
// hashes and its ranges, sorted, as numbers.
type ShardFilter struct {
	Field  string
	ranges []hashRange
	// Text is the selector as the client wrote it, for the match class.
	Text string
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

// NewShardFilter compiles pred's shard selector, nil when the request is
// not sharded (no selector, or the gate off: then the selector is ignored,
// as upstream's SelectionPredicate ignores it).
func NewShardFilter(pred storage.SelectionPredicate) (*ShardFilter, error) {
	if !pred.ShardingEnabled() {
		return nil, nil
	}
	reqs := pred.ShardSelector.Requirements()
	f := &ShardFilter{Text: pred.ShardSelector.String()}
	for _, req := range reqs {
		if f.Field != "" && req.Key != f.Field {
			return nil, fmt.Errorf("shard selector %q: ranges over two fields, %q and %q", f.Text, f.Field, req.Key)
		}
		f.Field = req.Key
		lo, loToEnd, err := parseHashBound(req.Start)
		if err != nil || loToEnd {
			return nil, fmt.Errorf("shard selector %q: start %q is not a 64-bit hash", f.Text, req.Start)
		}
		hi, toEnd, err := parseHashBound(req.End)
		if err != nil {
			return nil, fmt.Errorf("shard selector %q: end %q: %w", f.Text, req.End, err)
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

// Contains reports whether a shard key hashing to h is in the shard.
func (f *ShardFilter) Contains(h uint64) bool {
	for _, r := range f.ranges {
		if r.contains(h) {
			return true
		}
	}
	return false
}

// Selects reports whether o is in the shard; nil selects everything.
func (f *ShardFilter) Selects(o *Object) bool {
	if f == nil {
		return true
	}
	h, ok := ShardHashOf(o, f.Field)
	return ok && f.Contains(h)
}

// ShardHashOf is ShardHash of o's object; false when it cannot be read.
func ShardHashOf(o *Object, field string) (uint64, bool) {
	obj, err := o.Get()
	if err != nil {
		return 0, false
	}
	return ShardHash(obj, field)
}

// ShardHash is the hash of obj's shard key field, the way apimachinery's
// sharding.HashField computes it, without its string formatting.
func ShardHash(obj runtime.Object, field string) (uint64, bool) {
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return 0, false
	}
	switch field {
	case ShardFieldUID:
		return fnv64a(string(accessor.GetUID())), true
	case ShardFieldNamespace:
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

// ShardBucketBits is how many top bits of a hash pick its bucket: 256
// buckets, so with N watchers each on 1/N of the hash space an event is
// matched against about N/256 + 1 of them rather than N (upstream hashes
// every event against every watcher).
const ShardBucketBits = 8

// BucketOf is the shard bucket of hash h: its top ShardBucketBits bits.
func BucketOf(h uint64) int { return int(h >> (64 - ShardBucketBits)) }

// EachBucket calls fn with each bucket f's ranges overlap, once each, in
// order (the ranges are sorted by their start).
func (f *ShardFilter) EachBucket(fn func(b int)) {
	last := -1
	for _, r := range f.ranges {
		end, ok := r.lastHash()
		if !ok {
			continue
		}
		for b := max(BucketOf(r.lo), last+1); b <= BucketOf(end); b++ {
			fn(b)
			last = b
		}
	}
}
