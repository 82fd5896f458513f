package cachemetrics

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// A duration lands in the first bucket whose upper bound it does not
// pass (Prometheus' le), and past the last in +Inf; the sum is exact.
func TestStageHistogramBuckets(t *testing.T) {
	r := NewResourceStages(schema.GroupResource{Resource: "pods"}, []int64{10, 100})
	for _, c := range []struct {
		d      time.Duration
		n      uint64
		bucket int
	}{{0, 1, 0}, {10, 2, 0}, {11, 1, 1}, {100, 1, 1}, {101, 3, 2}, {-5, 1, 0}} {
		before := r.Stages[StageTotal].Counts[c.bucket].Load()
		r.Add(StageTotal, c.d, c.n)
		if got := r.Stages[StageTotal].Counts[c.bucket].Load() - before; got != c.n {
			t.Errorf("%v x%d: bucket %d got %d, want %d", c.d, c.n, c.bucket, got, c.n)
		}
	}
	if n, sum := r.Count(StageTotal); n != 9 || sum != 20+11+100+303 {
		t.Errorf("count %d sum %v, want 9 and %v", n, sum, time.Duration(20+11+100+303))
	}
}
