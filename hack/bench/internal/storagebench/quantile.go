package storagebench

import (
	"slices"
	"time"
)

// quantile is the nearest-rank q-quantile of a small sample (a few hundred
// values at most; larger samples go through package histogram).
func quantile(sample []time.Duration, q float64) time.Duration {
	if len(sample) == 0 {
		return 0
	}
	s := slices.Clone(sample)
	slices.Sort(s)
	rank := int(q*float64(len(s)) + 0.999999)
	return s[min(max(rank, 1), len(s))-1]
}
