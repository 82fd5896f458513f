package feed

import (
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// The progress requester asks etcd for watch progress on the cache's
// stream while anyone waits for the cache to reach an RV: one request
// loop for every waiter of the resource, spaced and backed off.

// ProgressRequestPeriod is the first spacing of progress requests while a
// reader waits for the cache to catch up; it doubles up to
// maxProgressBackoff while the same readers wait.
const ProgressRequestPeriod = 100 * time.Millisecond

// newcomerRequestSpacing is the longest a reader that began waiting after
// the last request waits for the next one. Upstream's cache asks every
// 100ms while anyone waits, but all its caches share one etcd watch stream,
// so a request for any resource moves every resource's RV: in a start
// storm a resource's WatchLists ride on the other resources' requests.
// Each of watchkeeper's caches has a
// stream of its own (docs/faults.md), so each asks for itself, at most this
// often while readers keep coming.
const newcomerRequestSpacing = 10 * time.Millisecond

// maxProgressBackoff caps the spacing of progress requests while the same
// readers wait: etcd answers a healthy request within milliseconds, so
// requests that go unanswered only need repeating in case one was lost.
const maxProgressBackoff = time.Second

// progressRequester asks etcd for watch progress on behalf of everyone in the
// cache who needs its resourceVersion to move: reads and watches waiting for
// freshness (a WatchList waiting for its floor among them), the storage
// liveness probe, fresh bookmarks. A thousand waiting clients cost one
// request at a time per resource: at once for the first waiter, within
// newcomerRequestSpacing for a waiter that came after the last request
// (etcd's answer to that one is of a revision from before the waiter read
// etcd's), and backing off while only waiters the last request was sent
// for wait, as when etcd does not answer.
//
// It is given what it uses, not the cache: a function that sends one
// request, a clock, the context and stop channel that end it and the
// WaitGroup that owns its goroutine.
type progressRequester struct {
	send  func(ctx context.Context)
	clock clock.Clock
	ctx   context.Context
	stop  <-chan struct{}
	wg    *sync.WaitGroup

	// mu is taken after the state's lock when both are held, never before,
	// and never with a watcher's (doc.go).
	mu      sync.Mutex
	waiters int
	// arrivals counts every wait, so the loop can tell whether a waiter
	// came after its last request.
	arrivals uint64
	running  bool
	// idle wakes the loop when the last waiter leaves, so it stops at once
	// instead of after its backoff; arrived wakes it when a waiter comes,
	// so a long backoff does not hold that waiter's request.
	idle, arrived chan struct{}
}

// idleNow is whether no loop runs and nobody waits.
func (p *progressRequester) idleNow() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.running && p.waiters == 0
}

func newProgressRequester(ctx context.Context, stop <-chan struct{}, wg *sync.WaitGroup, clk clock.Clock, send func(context.Context)) *progressRequester {
	return &progressRequester{send: send, clock: clk, ctx: ctx, stop: stop, wg: wg,
		idle: make(chan struct{}, 1), arrived: make(chan struct{}, 1)}
}

// wait registers a waiter: requests go out, the first at once, until every
// waiter has called the returned release.
func (p *progressRequester) wait() (release func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.waiters++
	p.arrivals++
	if !p.running && !closed(p.stop) {
		p.running = true
		p.wg.Add(1)
		go p.loop()
	} else {
		signal(p.arrived)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.waiters--
			if p.waiters == 0 {
				signal(p.idle)
			}
		})
	}
}

// signal wakes whoever selects on ch, or leaves it a wake-up.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// request sends one progress request unless one is already going out.
func (p *progressRequester) request() { p.wait()() }

func (p *progressRequester) loop() {
	defer p.wg.Done()
	backoff := ProgressRequestPeriod
	for {
		p.mu.Lock()
		sentFor := p.arrivals
		p.mu.Unlock()
		sentAt := p.clock.Now()
		ctx, cancel := context.WithTimeout(p.ctx, probeTimeout)
		p.send(ctx)
		cancel()

		newcomers, ok := p.waitNext(sentAt, sentFor, backoff)
		if !ok {
			return
		}
		if newcomers {
			backoff = 2 * ProgressRequestPeriod
		} else {
			backoff = min(2*backoff, maxProgressBackoff)
		}
	}
}

// waitNext waits until the next request is due: backoff after the last
// one (sent at sentAt, for the first sentFor arrivals), or
// newcomerRequestSpacing after it once a waiter has come since. It returns
// whether one has, and false for ok when the last waiter left or the
// requester stopped: then the loop ends without another request, which
// etcd would answer with a revision nobody asked the cache to reach.
func (p *progressRequester) waitNext(sentAt time.Time, sentFor uint64, backoff time.Duration) (newcomers, ok bool) {
	for {
		p.mu.Lock()
		if p.waiters == 0 || closed(p.stop) {
			p.running = false
			p.mu.Unlock()
			return false, false
		}
		newcomers = p.arrivals != sentFor
		p.mu.Unlock()
		due := backoff
		if newcomers {
			due = newcomerRequestSpacing
		}
		left := due - p.clock.Since(sentAt)
		if left <= 0 {
			return newcomers, true
		}
		t := p.clock.NewTimer(left)
		select {
		case <-t.C():
		case <-p.idle:
		case <-p.arrived:
		case <-p.stop:
		}
		t.Stop()
	}
}
