package storagebench

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/klog/v2"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
	"github.com/watchkeeper/watchkeeper/internal/histogram"
)

// fanOutWriters write the events concurrently, as a few controllers would.
const fanOutWriters = 4

// FanOut opens w watches, writes e new objects into the watched resource and
// measures delivery: throughput over the whole run and write-to-receipt
// latency of every delivered event (binned, not stored).
func FanOut(ctx context.Context, env Env, decorator string, w, e int) ([]result.Result, error) {
	rec := result.NewRecorder("fanout", Level, decorator, map[string]int{"watchers": w, "events": e})
	s, opts, destroy, err := openForFleet(ctx, env, decorator)
	if err != nil {
		return nil, err
	}
	defer destroy()

	var (
		latencies histogram.Histogram
		// lastReceipt has one slot per watch, written only by its consumer,
		// so recording it costs no contention.
		lastReceipt = make([]atomic.Int64, w)
		complete    atomic.Int64
		allComplete = make(chan struct{})
		badEvents   atomic.Int64
		slot        int
	)
	newHandler := func() eventHandler {
		mine := &lastReceipt[slot]
		slot++
		got := 0
		return func(ev watch.Event) {
			now := time.Now()
			if ev.Type != watch.Added {
				badEvents.Add(1)
				return
			}
			written, ok := writtenAt(ev)
			if !ok {
				badEvents.Add(1)
				return
			}
			latencies.Record(now.Sub(written))
			mine.Store(now.UnixNano())
			if got++; got == e && complete.Add(1) == int64(w) {
				close(allComplete)
			}
		}
	}
	f, openTime, err := openFleet(ctx, s, w, opts, newHandler)
	if err != nil {
		return nil, err
	}
	defer f.stop()
	waitGoroutinesSettle(500*time.Millisecond, 5*time.Second)

	firstWrite := time.Now()
	writeErr := writeTimestamped(ctx, s, e)
	writeTime := time.Since(firstWrite)
	if writeErr != nil {
		return nil, writeErr
	}
	if !waitDelivered(ctx, allComplete, &latencies) {
		klog.InfoS("Fan-out did not complete", "watchersComplete", complete.Load(), "of", w)
	}
	delivered := latencies.Count()
	var last int64
	for i := range lastReceipt {
		last = max(last, lastReceipt[i].Load())
	}
	f.report()
	if n := badEvents.Load(); n > 0 {
		klog.InfoS("Events that were not ADDED with a write timestamp", "count", n)
	}

	if span := time.Duration(last - firstWrite.UnixNano()); delivered > 0 && span > 0 {
		rec.Add("events_per_second", float64(delivered)/span.Seconds(), "events/s", result.Higher)
	}
	rec.Add("latency_p50_ms", ms(latencies.Quantile(0.50)), "ms", result.Lower)
	rec.Add("latency_p99_ms", ms(latencies.Quantile(0.99)), "ms", result.Lower)
	rec.Add("events_missing", float64(int64(w)*int64(e)-int64(delivered)), "events", result.Lower)
	rec.Add("watchers_closed", float64(f.closed.Load()), "watchers", result.Lower)
	rec.Add("write_seconds", writeTime.Seconds(), "s", result.Lower)
	rec.Add("open_seconds", openTime.Seconds(), "s", result.Lower)
	return rec.Results(), nil
}

// writeTimestamped creates e pods, each stamped with its write time, from a
// few concurrent writers.
func writeTimestamped(ctx context.Context, s storage.Interface, e int) error {
	return writePods(ctx, s, e, fanOutWriters, func(i int) *example.Pod {
		return benchPod(fmt.Sprintf("fan-%d", i), time.Now())
	})
}

// stallTimeout ends the wait for deliveries that stopped coming: a watch the
// cache closed will never complete, and waiting for it until the run's
// deadline would measure nothing.
const stallTimeout = 5 * time.Second

// waitDelivered waits until every watch has all events, or delivery stalls,
// or ctx ends; it reports whether every watch completed.
func waitDelivered(ctx context.Context, allComplete <-chan struct{}, latencies *histogram.Histogram) bool {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	last, since := latencies.Count(), time.Now()
	for {
		select {
		case <-allComplete:
			return true
		case <-ctx.Done():
			return false
		case <-t.C:
			if n := latencies.Count(); n != last {
				last, since = n, time.Now()
			} else if time.Since(since) > stallTimeout {
				return false
			}
		}
	}
}

func writtenAt(ev watch.Event) (time.Time, bool) {
	m, err := meta.Accessor(ev.Object)
	if err != nil {
		return time.Time{}, false
	}
	ns, err := strconv.ParseInt(m.GetAnnotations()[writtenAtAnnotation], 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
