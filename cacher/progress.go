package cacher

import (
	"context"
	"sync"
	"time"
)

// maxProgressBackoff caps the spacing of progress requests while someone
// waits: etcd answers a healthy request within milliseconds, so requests that
// go unanswered only need repeating in case one was lost.
const maxProgressBackoff = time.Second

// progressRequester asks etcd for watch progress on behalf of everyone in the
// cache who needs its resourceVersion to move: reads and watches waiting for
// freshness (a WatchList waiting for its floor among them), the storage
// liveness probe, fresh bookmarks. A thousand waiting clients cost one
// request at a time per resource, repeated with a backoff while any waits;
// upstream's cache asks once per waiting request.
type progressRequester struct {
	c *Cacher

	mu      sync.Mutex
	waiters int
	running bool
	// idle wakes the loop when the last waiter leaves, so it stops at once
	// instead of after its backoff.
	idle chan struct{}
}

func newProgressRequester(c *Cacher) *progressRequester {
	return &progressRequester{c: c, idle: make(chan struct{}, 1)}
}

// wait registers a waiter: requests go out, the first at once, until every
// waiter has called the returned release.
func (p *progressRequester) wait() (release func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.waiters++
	if !p.running && !p.c.stopping() {
		p.running = true
		p.c.wg.Add(1)
		go p.loop()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.waiters--
			if p.waiters == 0 {
				select {
				case p.idle <- struct{}{}:
				default:
				}
			}
		})
	}
}

// request sends one progress request unless one is already going out.
func (p *progressRequester) request() { p.wait()() }

func (p *progressRequester) loop() {
	defer p.c.wg.Done()
	backoff := progressRequestPeriod
	for {
		ctx, cancel := context.WithTimeout(p.c.ctx, probeTimeout)
		p.c.requestProgress(ctx)
		cancel()

		p.mu.Lock()
		if p.waiters == 0 {
			p.running = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		t := p.c.clock.NewTimer(backoff)
		select {
		case <-t.C():
		case <-p.idle:
		case <-p.c.stopCh:
		}
		t.Stop()
		backoff = min(2*backoff, maxProgressBackoff)
	}
}
