package feed

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"
)

// A reader that begins waiting while the requester backs off for readers
// etcd has not answered gets a request of its own within
// newcomerRequestSpacing: a start storm's WatchLists arrive one after
// another, each needing a revision after the last request's, and each
// waiting out a backoff held its API Priority and Fairness seat up to a
// second.
func TestProgressRequesterNewWaiterIsNotHeldByTheBackoff(t *testing.T) {
	p, clk, count, stop, wg := countingRequester()
	defer func() { close(stop); wg.Wait() }()
	defer p.wait()()
	cachertest.Poll(t, "the first request", func() bool { return count() == 1 && clk.Waiters() == 1 })
	// The one waiter's requests back off to a second apart.
	backoff := ProgressRequestPeriod
	for want := 2; backoff < maxProgressBackoff; want++ {
		clk.Step(backoff)
		cachertest.Poll(t, fmt.Sprintf("request %d after %v", want, backoff), func() bool { return count() == want && clk.Waiters() == 1 })
		backoff = min(2*backoff, maxProgressBackoff)
	}
	before := count()
	defer p.wait()()
	cachertest.Poll(t, "the newcomer's request's timer", func() bool { return clk.Waiters() == 1 })
	clk.Step(newcomerRequestSpacing - time.Millisecond)
	time.Sleep(10 * time.Millisecond)
	if n := count(); n != before {
		t.Fatalf("%d requests before %v, want %d", n, newcomerRequestSpacing, before)
	}
	clk.Step(time.Millisecond)
	cachertest.Poll(t, "a request for the newcomer within "+newcomerRequestSpacing.String(), func() bool { return count() == before+1 })
	// With no one new, the backoff resumes from the second spacing.
	cachertest.Poll(t, "the next request's timer", func() bool { return clk.Waiters() == 1 })
	clk.Step(2*ProgressRequestPeriod - time.Millisecond)
	time.Sleep(10 * time.Millisecond)
	if n := count(); n != before+1 {
		t.Fatalf("%d requests before the backoff's %v, want %d", n, 2*ProgressRequestPeriod, before+1)
	}
	clk.Step(time.Millisecond)
	cachertest.Poll(t, "the request after the backoff", func() bool { return count() == before+2 })
}

// The requester alone, with a fake clock and a counting send: one request
// at once for the first waiter, none more for others joining, then one per
// backoff (100ms, 200ms, ... up to 1s) while anyone waits; nothing once the
// last waiter leaves; nothing after stop.
func TestProgressRequesterAlone(t *testing.T) {
	p, clk, count, stop, wg := countingRequester()
	releases := []func(){p.wait()}
	cachertest.Poll(t, "the first request", func() bool { return count() == 1 && clk.Waiters() == 1 })
	for range 9 {
		releases = append(releases, p.wait())
	}
	if n := count(); n != 1 {
		t.Fatalf("%d requests for 10 waiters before any backoff, want 1", n)
	}
	backoff := ProgressRequestPeriod
	for want := 2; want <= 6; want++ {
		clk.Step(backoff)
		cachertest.Poll(t, fmt.Sprintf("request %d after %v", want, backoff), func() bool { return count() == want && clk.Waiters() == 1 })
		backoff = min(2*backoff, maxProgressBackoff)
	}
	for _, release := range releases {
		release()
		release() // twice is harmless
	}
	cachertest.Poll(t, "the loop to end with the last waiter", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return !p.running && clk.Waiters() == 0
	})
	// The last waiter leaving ends the loop without another request: etcd
	// would answer it with a revision nobody asked the cache to reach.
	if n := count(); n != 6 {
		t.Errorf("%d requests in all, want 6: one went out after the last waiter left", n)
	}
	before := count()
	close(stop)
	p.request()
	wg.Wait()
	if n := count(); n != before {
		t.Errorf("%d requests after stop, want none", n-before)
	}
}

// countingRequester is a progress requester on a fake clock whose send
// counts the requests; closing stop and waiting on wg end it.
func countingRequester() (p *progressRequester, clk *testingclock.FakeClock, count func() int, stop chan struct{}, wg *sync.WaitGroup) {
	clk = testingclock.NewFakeClock(cachertest.Epoch)
	var mu sync.Mutex
	sent := 0
	count = func() int { mu.Lock(); defer mu.Unlock(); return sent }
	stop, wg = make(chan struct{}), &sync.WaitGroup{}
	p = newProgressRequester(context.Background(), stop, wg, clk, func(context.Context) {
		mu.Lock()
		sent++
		mu.Unlock()
	})
	return p, clk, count, stop, wg
}
