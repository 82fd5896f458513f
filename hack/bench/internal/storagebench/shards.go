package storagebench

import (
	"fmt"
	"hash/fnv"
	"math/bits"
	"math/rand/v2"
	"sort"

	"k8s.io/apimachinery/pkg/types"
)

// Sharded list and watch (gate ShardedListAndWatch, beta in 1.38): a watch
// carries a shard selector, shardRange(object.metadata.uid, START, END), and
// gets only the objects whose FNV-1a 64 hash of the UID falls in
// [START, END). START and END are 0x and 16 lowercase hex digits, except the
// last range's END, 2^64, which has 17 (apimachinery's pkg/sharding).

// shardField is the field every shard of the sharded scenario hashes.
const shardField = "object.metadata.uid"

// hashSpaceEnd is the END of the last range: 2^64, one past the largest
// hash.
const hashSpaceEnd = "0x10000000000000000"

// shardRange is one shard's part of the hash space: hashes from start up to,
// not including, end; last is the range that ends at 2^64 (end is then 0,
// as 2^64 does not fit).
type shardRange struct {
	start, end uint64
	last       bool
}

// shardRanges splits the hash space into n ranges of equal width, as n
// kube-state-metrics shards (or apimachinery's NewShardRangeSelector) do:
// range i starts at floor(i * 2^64 / n), and each ends where the next
// starts, the last at 2^64.
func shardRanges(n int) []shardRange {
	if n <= 0 {
		return nil
	}
	ranges := make([]shardRange, n)
	for i := range ranges {
		ranges[i].start, _ = bits.Div64(uint64(i), 0, uint64(n))
		if i > 0 {
			ranges[i-1].end = ranges[i].start
		}
	}
	ranges[n-1].last = true
	return ranges
}

func (r shardRange) contains(h uint64) bool { return h >= r.start && (r.last || h < r.end) }

// selector is the range as a watch's shard selector, in the syntax
// k8s.io/apiserver/pkg/sharding.Parse reads (what ?shardSelector= carries).
func (r shardRange) selector() string {
	end := hashSpaceEnd
	if !r.last {
		end = fmt.Sprintf("0x%016x", r.end)
	}
	return fmt.Sprintf("shardRange(%s, '0x%016x', '%s')", shardField, r.start, end)
}

// shardOf is the index of the range of ranges (shardRanges' output) that
// holds hash h.
func shardOf(ranges []shardRange, h uint64) int {
	// The first range that ends after h; the last ends after every hash.
	return sort.Search(len(ranges), func(i int) bool { return ranges[i].last || h < ranges[i].end })
}

// uidHash is the hash a shard selector compares: FNV-1a 64 of the UID's
// bytes (apimachinery's sharding.HashField), computed here on its own so the
// scenario checks the caches' filtering against an independent reading.
func uidHash(uid types.UID) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(uid))
	return h.Sum64()
}

// shardedUID is object i's UID in the sharded scenario: 16 bytes from a
// generator seeded with (seed, i), laid out as a random (version 4, RFC 4122
// variant) UUID, as the apiserver gives objects. The writer process and the
// scenario compute the same UIDs, so the scenario knows which shard owns each
// object before any is written.
func shardedUID(seed uint64, i int) types.UID {
	rng := rand.New(rand.NewPCG(seed, uint64(i)))
	var b [16]byte
	for k := 0; k < 16; k += 8 {
		v := rng.Uint64()
		for j := range 8 {
			b[k+j] = byte(v >> (8 * j))
		}
	}
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // variant 10
	return types.UID(fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]))
}

func shardedName(i int) string { return fmt.Sprintf("shard-%d", i) }
