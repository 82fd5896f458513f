// Package histogram is a fixed-size, HDR-like latency histogram that many
// goroutines record into at once. A fan-out run delivers watchers*events
// latencies (10M at 10k x 1k); keeping them all would cost more memory than
// the caches under test, so values are binned on arrival with a bounded
// relative error instead.
package histogram

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// subBits sets the precision: 2^subBits sub-buckets per power of two keep
// every value within 1/64 (1.6%) of its bucket's bounds.
const (
	subBits   = 6
	subCount  = 1 << subBits
	linearMax = 2 * subCount // values below this are their own bucket
	// 63 significant bits of a non-negative int64 need this many buckets.
	bucketCount = linearMax + (63-subBits-1)*subCount
)

// Histogram counts durations into log-linear buckets. The zero value is
// ready to use; Record is safe for concurrent use.
type Histogram struct {
	counts [bucketCount]atomic.Uint64
	total  atomic.Uint64
}

// Record adds one duration. Negative durations (clock steps) count as 0.
func (h *Histogram) Record(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[index(v)].Add(1)
	h.total.Add(1)
}

// Count is the number of recorded values.
func (h *Histogram) Count() uint64 { return h.total.Load() }

// Quantile returns the value at quantile q in [0, 1] (the midpoint of its
// bucket), or 0 when nothing was recorded. Call it once recording is done.
func (h *Histogram) Quantile(q float64) time.Duration {
	n := h.total.Load()
	if n == 0 {
		return 0
	}
	// The rank of the q-quantile among n values, 1-based, as nearest-rank.
	rank := uint64(q*float64(n) + 0.999999)
	rank = min(max(rank, 1), n)
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			lo, hi := bounds(i)
			return time.Duration(lo + (hi-lo)/2)
		}
	}
	lo, hi := bounds(bucketCount - 1)
	return time.Duration(lo + (hi-lo)/2)
}

func index(v uint64) int {
	if v < linearMax {
		return int(v)
	}
	shift := bits.Len64(v) - subBits - 1
	mantissa := v >> shift // in [subCount, 2*subCount)
	return linearMax + (shift-1)*subCount + int(mantissa-subCount)
}

// bounds are the smallest and largest value that land in bucket i.
func bounds(i int) (lo, hi uint64) {
	if i < linearMax {
		return uint64(i), uint64(i)
	}
	shift := (i-linearMax)/subCount + 1
	mantissa := uint64((i-linearMax)%subCount + subCount)
	return mantissa << shift, (mantissa+1)<<shift - 1
}
