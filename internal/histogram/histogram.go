// Package histogram is a fixed-size, HDR-like latency histogram that many
// goroutines record into at once, and the nearest-rank quantile of a small
// sample. A fan-out run delivers watchers*events latencies (10M at 10k x
// 1k); keeping them all would cost more memory than the caches under test,
// so values are binned on arrival with a bounded relative error instead.
// The benchmarks, the soak and the integration tests all measure with it.
package histogram

import (
	"math/bits"
	"slices"
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
	max    atomic.Int64
}

// Record adds one duration. Negative durations (clock steps) count as 0.
func (h *Histogram) Record(d time.Duration) {
	d = max(d, 0)
	h.counts[index(uint64(d))].Add(1)
	h.total.Add(1)
	for {
		m := h.max.Load()
		if int64(d) <= m || h.max.CompareAndSwap(m, int64(d)) {
			return
		}
	}
}

// Count is the number of recorded values.
func (h *Histogram) Count() uint64 { return h.total.Load() }

// Max is the largest recorded value (exact), or 0 when nothing was recorded.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max.Load()) }

// Quantile returns the value at quantile q in [0, 1] (the midpoint of its
// bucket, at most Max), or 0 when nothing was recorded. Call it once
// recording is done.
func (h *Histogram) Quantile(q float64) time.Duration { return Quantile(q, h) }

// Quantile is the value at quantile q of several histograms pooled, as
// Histogram.Quantile is of one.
func Quantile(q float64, hs ...*Histogram) time.Duration {
	var n uint64
	var top time.Duration
	for _, h := range hs {
		n += h.Count()
		top = max(top, h.Max())
	}
	if n == 0 {
		return 0
	}
	// The rank of the q-quantile among n values, 1-based, as nearest-rank.
	rank := uint64(q*float64(n) + 0.999999)
	rank = min(max(rank, 1), n)
	var seen uint64
	for i := range bucketCount {
		for _, h := range hs {
			seen += h.counts[i].Load()
		}
		if seen >= rank {
			lo, hi := bounds(i)
			return min(time.Duration(lo+(hi-lo)/2), top)
		}
	}
	return top
}

// SampleQuantile is the nearest-rank q-quantile of a small sample, kept
// whole (a few hundred values at most; larger samples go through a
// Histogram).
func SampleQuantile(sample []time.Duration, q float64) time.Duration {
	if len(sample) == 0 {
		return 0
	}
	s := slices.Clone(sample)
	slices.Sort(s)
	rank := int(q*float64(len(s)) + 0.999999)
	return s[min(max(rank, 1), len(s))-1]
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
