package histogram

import (
	"math"
	"testing"
	"time"
)

func TestBucketsCoverEveryValueWithBoundedError(t *testing.T) {
	for _, v := range []uint64{0, 1, 127, 128, 129, 1000, 123456789, 1 << 40, math.MaxInt64} {
		i := index(v)
		lo, hi := bounds(i)
		if v < lo || v > hi {
			t.Errorf("value %d in bucket %d [%d, %d]", v, i, lo, hi)
		}
		if v >= linearMax && float64(hi-lo)/float64(lo) > 1.0/subCount {
			t.Errorf("bucket %d [%d, %d] wider than 1/%d", i, lo, hi, subCount)
		}
	}
	if i := index(math.MaxInt64); i != bucketCount-1 {
		t.Errorf("largest value in bucket %d, want the last, %d", i, bucketCount-1)
	}
}

func TestQuantiles(t *testing.T) {
	var h Histogram
	if h.Quantile(0.5) != 0 {
		t.Fatal("empty histogram has a median")
	}
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Millisecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Millisecond}, {0.99, 990 * time.Millisecond}, {1, time.Second}} {
		got := h.Quantile(c.q)
		if diff := math.Abs(float64(got-c.want)) / float64(c.want); diff > 1.0/subCount {
			t.Errorf("q%.2f = %v, want %v within 1/%d", c.q, got, c.want, subCount)
		}
	}
}
