package httpbench

import (
	"testing"
	"time"
)

func TestHistogramBucketsCoverEveryValue(t *testing.T) {
	for _, v := range []uint64{0, 1, 63, 64, 65, 127, 128, 1000, 1 << 20, 123456789, 1<<40 - 1} {
		i := histBucket(v)
		low, width := histBucketBounds(i)
		if v < low || v >= low+width {
			t.Errorf("value %d in bucket %d = [%d, %d)", v, i, low, low+width)
		}
		if v >= histSub && width*histSub > low {
			t.Errorf("bucket %d = [%d, %d) wider than 1/%d of its value", i, low, low+width, histSub)
		}
	}
	if i := histBucket(1 << 50); i != histBuckets-1 {
		t.Errorf("out of range value in bucket %d, want the last (%d)", i, histBuckets-1)
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h histogram
	// 1ms..100ms in 1ms steps: p50 is 50ms and p99 is 99ms, within a bucket.
	for i := 1; i <= 100; i++ {
		h.record(time.Duration(i) * time.Millisecond)
	}
	h.record(-time.Second) // a stepped clock counts as instant, not lost
	if h.count() != 101 {
		t.Fatalf("count = %d", h.count())
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {1, 100 * time.Millisecond}} {
		got := h.quantile(c.q)
		if diff := got - c.want; diff < -c.want/histSub || diff > c.want/histSub {
			t.Errorf("quantile(%v) = %v, want %v within 1/%d", c.q, got, c.want, histSub)
		}
	}
	if got := (&histogram{}).quantile(0.5); got != 0 {
		t.Errorf("empty histogram quantile = %v", got)
	}
}
