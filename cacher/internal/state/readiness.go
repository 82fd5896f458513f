package state

import (
	"time"
)

type readyState int

const (
	statePending readyState = iota // no list in yet, or relisting
	Ready
	Stopped
)

// readiness is the cache's serving state; State.mu guards it.
type readiness struct {
	state readyState
	// since is when the cache last stopped being ready, for Retry-After.
	since time.Time
	// changed is closed and replaced on every transition.
	changed chan struct{}
}

func (r *readiness) init(now time.Time) {
	r.state, r.since, r.changed = statePending, now, make(chan struct{})
}

func (r *readiness) set(s readyState, now time.Time) {
	if r.state == s || r.state == Stopped {
		return
	}
	if s == statePending {
		r.since = now
	}
	r.state = s
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *readiness) stop() { r.set(Stopped, time.Time{}) }
