package httpbench

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// histogram counts durations in log-linear buckets: each power of two is
// cut into histSub equal buckets, so a quantile is off by at most 1/histSub
// (1.6%) of its value, in fixed memory whatever the number of samples. A
// fan-out run delivers watchers x events samples (10 million at 10k x 1k),
// too many to keep. Counters are atomic so every consumer goroutine records
// into the one histogram without a lock.
type histogram struct {
	counts [histBuckets]atomic.Uint64
	total  atomic.Uint64
}

const (
	histSubBits = 6
	histSub     = 1 << histSubBits
	// histMaxBits bounds the range at 2^40ns (18 minutes); longer samples
	// fall in the last bucket.
	histMaxBits = 40
	histBuckets = (histMaxBits - histSubBits + 1) * histSub
)

func (h *histogram) record(d time.Duration) {
	if d < 0 {
		// The writer's and the reader's clocks are the same wall clock, but
		// it may step; a negative latency is an instant one.
		d = 0
	}
	h.counts[histBucket(uint64(d))].Add(1)
	h.total.Add(1)
}

func (h *histogram) count() uint64 { return h.total.Load() }

// quantile returns the middle of the bucket holding the q-th sample (0 < q
// <= 1), or 0 with no samples.
func (h *histogram) quantile(q float64) time.Duration {
	n := h.total.Load()
	if n == 0 {
		return 0
	}
	rank := uint64(q * float64(n))
	if float64(rank) < q*float64(n) {
		rank++ // ceil: the 0.5 quantile of 3 samples is the 2nd
	}
	rank = max(rank, 1)
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			low, width := histBucketBounds(i)
			return time.Duration(low + width/2)
		}
	}
	// Counts raced past total while we read: the top bucket in use is as
	// good an answer as any.
	for i := histBuckets - 1; i >= 0; i-- {
		if h.counts[i].Load() > 0 {
			low, width := histBucketBounds(i)
			return time.Duration(low + width/2)
		}
	}
	return 0
}

func histBucket(v uint64) int {
	if v < histSub {
		return int(v)
	}
	// e is how far v must shift right to land in [histSub, 2*histSub).
	e := bits.Len64(v) - histSubBits - 1
	i := (e+1)*histSub + int(v>>e) - histSub
	return min(i, histBuckets-1)
}

// histBucketBounds returns the lowest value of bucket i and its width.
func histBucketBounds(i int) (low, width uint64) {
	if i < histSub {
		return uint64(i), 1
	}
	e := i/histSub - 1
	return uint64(i%histSub+histSub) << e, 1 << e
}
