package storagebench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
	"github.com/watchkeeper/watchkeeper/internal/histogram"
)

// SlowTax is what slow watchers cost the fast ones, as upstream's
// BenchmarkSlowWatcherTax (kubernetes/kubernetes#141475) asks: fast
// watchers that always read, and events written at rate a second, events
// of them in each of three phases:
//   - baseline: the fast watchers alone;
//   - stalled: plus slow watchers that never read, opened at the phase's
//     start (upstream's stalled-once);
//   - reconnecting: plus slow watchers that never read, each replaced by a
//     new one every slowTaxReconnect (upstream's stalled-reconnecting: a
//     client whose watch was closed comes back).
//
// For each phase: the fast watchers' write-to-receipt latency (p50, p99,
// max) and throughput, the events they missed, and how many slow watches
// the cache closed (a stalled watchkeeper watch is not closed: its client
// gets everything once it reads; upstream's cache closes it after blocking
// its dispatcher up to its budget). stalled_p99_tax is the stalled phase's
// p99 over the baseline's.
func SlowTax(ctx context.Context, env Env, decorator string, fast, slow, events, rate int) ([]result.Result, error) {
	rec := result.NewRecorder("slowtax", Level, decorator, map[string]int{"watchers": fast, "slow": slow, "events": events, "rate": rate})
	if rate <= 0 || events <= 0 {
		return nil, fmt.Errorf("slowtax needs events and a rate, got %d and %d", events, rate)
	}
	s, opts, destroy, err := openForFleet(ctx, env, decorator)
	if err != nil {
		return nil, err
	}
	defer destroy()

	phases := []string{"baseline", "stalled", "reconnecting"}
	var (
		mu        sync.Mutex
		latencies = make([]histogram.Histogram, len(phases))
		first     = make([]time.Time, len(phases))
		last      = make([]time.Time, len(phases))
		delivered = make([]int, len(phases))
	)
	newHandler := func() eventHandler {
		return func(ev watch.Event) {
			now := time.Now()
			p, ok := slowTaxPhase(ev)
			if !ok {
				return
			}
			written, ok := writtenAt(ev)
			if !ok {
				return
			}
			latencies[p].Record(now.Sub(written))
			mu.Lock()
			delivered[p]++
			if now.After(last[p]) {
				last[p] = now
			}
			mu.Unlock()
		}
	}
	f, _, err := openFleet(ctx, s, fast, opts, newHandler)
	if err != nil {
		return nil, err
	}
	defer f.stop()
	waitGoroutinesSettle(500*time.Millisecond, 5*time.Second)

	var tax [2]float64 // baseline and stalled p99
	for p, phase := range phases {
		var slows slowWatches
		stopSlows := func() {}
		switch phase {
		case "stalled":
			if err := slows.open(ctx, s, slow); err != nil {
				return nil, err
			}
		case "reconnecting":
			if err := slows.open(ctx, s, slow); err != nil {
				return nil, err
			}
			stopSlows = slows.reconnectEvery(ctx, s, slow, slowTaxReconnect)
		}
		first[p] = time.Now()
		writeErr := writePaced(ctx, s, events, rate, func(i int) string { return fmt.Sprintf("tax-%d-%d", p, i) })
		stopSlows()
		if writeErr != nil {
			return nil, writeErr
		}
		want := fast * events
		waitUntil(ctx, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return delivered[p] >= want
		}, stallTimeout)
		closed := slows.closeAll()

		mu.Lock()
		got, span := delivered[p], last[p].Sub(first[p])
		mu.Unlock()
		if span > 0 && got > 0 {
			rec.Add(phase+"_events_per_second", float64(got)/span.Seconds(), "events/s", result.Higher)
		}
		rec.Add(phase+"_latency_p50_ms", ms(latencies[p].Quantile(0.50)), "ms", result.Lower)
		rec.Add(phase+"_latency_p99_ms", ms(latencies[p].Quantile(0.99)), "ms", result.Lower)
		rec.Add(phase+"_latency_max_ms", ms(latencies[p].Max()), "ms", result.Lower)
		rec.Add(phase+"_events_missing", float64(want-got), "events", result.Lower)
		if phase != "baseline" {
			rec.Add(phase+"_slow_watches_closed", float64(closed), "watches", result.Lower)
		}
		if p < len(tax) {
			tax[p] = ms(latencies[p].Quantile(0.99))
		}
	}
	if tax[0] > 0 {
		rec.Add("stalled_p99_tax", tax[1]/tax[0], "x", result.Lower)
	}
	f.report()
	rec.Add("fast_watchers_closed", float64(f.closed.Load()), "watchers", result.Lower)
	return rec.Results(), nil
}

// slowTaxReconnect is how often a reconnecting slow watcher is replaced:
// upstream's benchmark gives a stalled companion 500ms to fill its channels
// and block the dispatcher.
const slowTaxReconnect = 500 * time.Millisecond

// slowTaxPhase is the phase an event of SlowTax was written in, from its
// object's name (tax-<phase>-<i>).
func slowTaxPhase(ev watch.Event) (int, bool) {
	m, err := meta.Accessor(ev.Object)
	if err != nil {
		return 0, false
	}
	rest, ok := strings.CutPrefix(m.GetName(), "tax-")
	if !ok {
		return 0, false
	}
	p, _, _ := strings.Cut(rest, "-")
	n, err := strconv.Atoi(p)
	return n, err == nil
}

// writePaced creates n pods named name(i), stamped with their write time,
// at rate a second from a few writers (writePods), paced by one ticker.
func writePaced(ctx context.Context, s storage.Interface, n, rate int, name func(i int) string) error {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	return writePods(ctx, s, n, min(fanOutWriters, n), func(i int) *example.Pod {
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
		return benchPod(name(i), time.Now())
	})
}

// waitUntil polls done until it holds, ctx ends or timeout passes.
func waitUntil(ctx context.Context, done func() bool, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for !done() && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
}

// slowWatches are watches nobody reads. The cache may close them: closed
// counts those found closed when they were replaced or at the end.
type slowWatches struct {
	mu      sync.Mutex
	watches []watch.Interface
	closed  int
	wg      sync.WaitGroup
}

func (sw *slowWatches) open(ctx context.Context, s storage.Interface, n int) error {
	opts, err := fleetOptions(ctx, s)
	if err != nil {
		return err
	}
	for range n {
		w, err := s.Watch(ctx, resourcePrefix, opts)
		if err != nil {
			return err
		}
		sw.mu.Lock()
		sw.watches = append(sw.watches, w)
		sw.mu.Unlock()
	}
	return nil
}

// reconnectEvery replaces the watches with new ones every period until the
// returned stop is called.
func (sw *slowWatches) reconnectEvery(ctx context.Context, s storage.Interface, n int, period time.Duration) (stop func()) {
	done := make(chan struct{})
	sw.wg.Go(func() {
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			sw.mu.Lock()
			old := sw.watches
			sw.watches = nil
			sw.mu.Unlock()
			sw.end(old)
			if err := sw.open(ctx, s, n); err != nil {
				return
			}
		}
	})
	return func() { close(done); sw.wg.Wait() }
}

// closeAll ends every watch and returns how many the cache closed.
func (sw *slowWatches) closeAll() int {
	sw.mu.Lock()
	ws := sw.watches
	sw.watches = nil
	sw.mu.Unlock()
	sw.end(ws)
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return sw.closed
}

// end counts the watches of ws the cache closed (their channel closes once
// what it holds is read, or an Error event says so), then stops them all.
func (sw *slowWatches) end(ws []watch.Interface) {
	closed := 0
	for _, w := range ws {
		if cacheClosed(w) {
			closed++
		}
		w.Stop()
	}
	sw.mu.Lock()
	sw.closed += closed
	sw.mu.Unlock()
}

// cacheClosed reads what w holds without waiting for more, and reports
// whether the cache had closed it. A watch that is open keeps giving events
// (a stalled watchkeeper watch is fed its catch-up as it is read): it is
// read for at most 100ms.
func cacheClosed(w watch.Interface) bool {
	for deadline := time.Now().Add(100 * time.Millisecond); time.Now().Before(deadline); {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error {
				return true
			}
		default:
			return false
		}
	}
	return false
}
