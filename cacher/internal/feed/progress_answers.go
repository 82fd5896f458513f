package feed

import (
	"sync"
	"time"
)

// progressAnswers times etcd's answers to the cache's progress requests:
// from the oldest request not yet answered to the next progress
// notification on the storage watch. Each cache asks on a stream of its
// own, and etcd answers there only while every watch on it is synced, so
// a request can go unanswered and be sent again: the wait counts from the
// first. What a read waits for its resourceVersion (read_wait_seconds)
// also holds the caller's own etcd round trip; this is the part that is
// etcd's answer. mu is a leaf.
type progressAnswers struct {
	mu sync.Mutex
	// asked is when the oldest unanswered request went out; zero when
	// none waits.
	asked time.Time
}

// sent records a request sent at now.
func (p *progressAnswers) sent(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.asked.IsZero() {
		p.asked = now
	}
}

// answered records a progress notification at now and returns how long
// the oldest request waited for it; false when no request waited (etcd's
// own periodic notifications).
func (p *progressAnswers) answered(now time.Time) (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.asked.IsZero() {
		return 0, false
	}
	took := now.Sub(p.asked)
	p.asked = time.Time{}
	return took, true
}
