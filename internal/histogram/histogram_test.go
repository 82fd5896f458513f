package histogram

import (
	"math"
	"testing"
	"time"
)

func TestBucketsCoverEveryValueWithBoundedError(t *testing.T) {
	for _, v := range []uint64{0, 1, 63, 64, 65, 127, 128, 129, 1000, 1 << 20, 123456789, 1 << 40, math.MaxInt64} {
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

// Quantiles are nearest-rank: the 0.5 quantile of three values is the
// second, and the 0.99 quantile of 100 values the 99th, not the 100th.
// Values below linearMax have a bucket each, so these are exact.
func TestQuantilesAreNearestRank(t *testing.T) {
	var three Histogram
	for _, d := range []time.Duration{10, 20, 30} {
		three.Record(d)
	}
	if got := three.Quantile(0.5); got != 20 {
		t.Errorf("median of 10, 20, 30 = %d, want 20", got)
	}
	var hundred Histogram
	for i := 1; i <= 100; i++ {
		hundred.Record(time.Duration(i))
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.01, 1}, {0.5, 50}, {0.99, 99}, {1, 100}} {
		if got := hundred.Quantile(c.q); got != c.want {
			t.Errorf("q%.2f of 1..100 = %d, want %d", c.q, got, c.want)
		}
	}
}

// A clock that steps back makes a negative latency: it counts as instant,
// not lost.
func TestNegativeDurationsCountAsZero(t *testing.T) {
	var h Histogram
	h.Record(-time.Second)
	h.Record(-1)
	if h.Count() != 2 {
		t.Fatalf("Count() = %d, want 2", h.Count())
	}
	if got := h.Quantile(1); got != 0 {
		t.Errorf("max of two negative durations = %v, want 0", got)
	}
}

// Several histograms pooled give the quantile of all their values, and no
// quantile is above the largest value recorded.
func TestPooledQuantileAndMax(t *testing.T) {
	var a, b Histogram
	for i := 1; i <= 50; i++ {
		a.Record(time.Duration(i))
		b.Record(time.Duration(50 + i))
	}
	if got := Quantile(0.5, &a, &b); got != 50 {
		t.Errorf("pooled median of 1..100 = %d, want 50", got)
	}
	if got := Quantile(0.99, &a, &b); got != 99 {
		t.Errorf("pooled q0.99 of 1..100 = %d, want 99", got)
	}
	var big Histogram
	big.Record(1000003 * time.Nanosecond)
	if big.Max() != 1000003 || big.Quantile(1) != 1000003 {
		t.Errorf("max %d, q1 %d; want both 1000003", big.Max(), big.Quantile(1))
	}
	if Quantile(0.5) != 0 {
		t.Error("no histograms have a median")
	}
}

func TestSampleQuantileIsNearestRank(t *testing.T) {
	if SampleQuantile(nil, 0.5) != 0 {
		t.Error("empty sample has a median")
	}
	sample := []time.Duration{30, 10, 20}
	if got := SampleQuantile(sample, 0.5); got != 20 {
		t.Errorf("median of 10, 20, 30 = %d, want 20", got)
	}
	if got := SampleQuantile(sample, 1); got != 30 {
		t.Errorf("max of 10, 20, 30 = %d, want 30", got)
	}
	if sample[0] != 30 {
		t.Error("SampleQuantile sorted its argument")
	}
}
