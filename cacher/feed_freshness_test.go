package cacher

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
	compbasemetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/utils/ptr"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachemetrics"
	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"
	"github.com/watchkeeper/watchkeeper/cacher/internal/feed"
)

// A stuck progress path: etcd is ahead of the cache and never answers a
// progress request. Many WatchList clients waiting for their floor cost one
// request at a time for the resource, spaced by a growing backoff, not one
// per client per period; after the freshness timeout each gets a 504 (so
// client-go falls back to a LIST), counted in freshness_timeouts_total.
func TestWatchListWaitersShareProgressRequestsAndEnd(t *testing.T) {
	const clients = 50
	fs := cachertest.NewFakeStorage(100)
	c := newTestCacher(t, fs, nil)
	c.waitReady(t)
	fs.SetCurrentRV(200) // etcd moved on; the cache hears nothing of it
	before := counter(t, c.metrics.FreshnessTimeouts[cachemetrics.RequestWatchList])

	type result struct {
		w   watch.Interface
		err error
	}
	results := make(chan result, clients)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			w, err := c.Watch(context.Background(), "/pods/", storage.ListOptions{
				ResourceVersion: "", SendInitialEvents: ptr.To(true), Recursive: true, Predicate: cachertest.Everything(true),
			})
			results <- result{w, err}
		})
	}
	// Every client waits: the tick, one freshness timer each, and the
	// requester's one backoff timer.
	c.waitWaiters(t, cacheTimers+clients+1)
	if got := fs.ProgressCount(); got != 1 {
		t.Fatalf("%d clients began waiting: %d progress requests, want 1", clients, got)
	}
	// Over the 3s timeout the requests back off: 100ms, 200ms, 400ms, 800ms,
	// then every second.
	for step := time.Duration(0); step < feed.FreshnessTimeout; step += 100 * time.Millisecond {
		c.clk.Step(100 * time.Millisecond)
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	close(results)
	requests := fs.ProgressCount()
	if requests < 4 || requests > 8 {
		t.Errorf("progress requests over %v with %d clients waiting: %d, want one at a time with backoff (4..8)", feed.FreshnessTimeout, clients, requests)
	}
	t.Logf("%d WatchList clients waited %v: %d progress requests in all", clients, feed.FreshnessTimeout, requests)

	for r := range results {
		if r.err != nil {
			t.Fatalf("Watch returned %v; want the error in the stream", r.err)
		}
		ev := cachertest.NextEvent(t, r.w)
		err := apierrors.FromObject(ev.Object)
		if ev.Type != watch.Error || !apierrors.IsTimeout(err) || !strings.Contains(err.Error(), "Too large resource version") {
			t.Fatalf("got %s (%v), want an ERROR 504 Too large resource version", cachertest.Describe(ev), err)
		}
		if rest := cachertest.DrainUntilClosed(t, r.w); len(rest) != 0 {
			t.Fatalf("events after the error: %d", len(rest))
		}
	}
	if got := counter(t, c.metrics.FreshnessTimeouts[cachemetrics.RequestWatchList]) - before; got != clients {
		t.Errorf("freshness_timeouts_total{request=watchlist} moved by %v, want %d", got, clients)
	}
	// Nobody waits now: the requester's loop has ended (only the tick's
	// timer is armed), so nothing can send another request.
	c.waitWaiters(t, cacheTimers)
	cachertest.Poll(t, "the requester's loop to end", func() bool {
		return c.feed.ProgressIdle()
	})
}

func counter(t *testing.T, m compbasemetrics.CounterMetric) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(m)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// hangingRV is a storage whose current-revision read never answers, as
// with etcd down.
type hangingRV struct{ *cachertest.FakeStorage }

func (hangingRV) GetCurrentResourceVersion(ctx context.Context) (uint64, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

// A WatchList with no resourceVersion needs etcd's current revision; when
// etcd does not answer it gets a 504 after the freshness timeout instead of
// hanging for the whole outage.
func TestWatchListGivesUpOnAStuckStorage(t *testing.T) {
	fs := cachertest.NewFakeStorage(100)
	c := newTestCacher(t, fs, func(cfg *Config) { cfg.Storage = hangingRV{fs} })
	c.waitReady(t)
	start := time.Now()
	// The read is bounded by a real timer (freshnessTimeout): a Watch that
	// hangs on the read never returns, and one that returns only after
	// ten times the bound is as good as hung.
	done := watchAsync(c, "/pods/", storage.ListOptions{
		ResourceVersion: "", SendInitialEvents: ptr.To(true), Recursive: true, Predicate: cachertest.Everything(true),
	})
	var r watchResult
	select {
	case r = <-done:
	case <-time.After(10 * feed.FreshnessTimeout):
		t.Fatalf("Watch still waits on a storage that never answers after %v", 10*feed.FreshnessTimeout)
	}
	if r.err != nil {
		t.Fatalf("Watch: %v", r.err)
	}
	t.Logf("gave up after %v (bound %v)", time.Since(start).Round(time.Millisecond), feed.FreshnessTimeout)
	s := cachertest.ErrorStatus(t, cachertest.NextEvent(t, r.w))
	if s.Code != 504 || s.Details == nil || s.Details.RetryAfterSeconds != 1 {
		t.Errorf("status %d (%q), retry %+v; want 504 with Retry-After 1", s.Code, s.Message, s.Details)
	}
}
