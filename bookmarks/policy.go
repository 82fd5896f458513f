package bookmarks

import "time"

// Policy decides when a watcher's next bookmark is due. The schedule's
// values, and upstream's defaults, are the options package's: this package
// takes them as given.
type Policy struct {
	// Frequency is the heartbeat: a watcher hears from the cache at least this
	// often, so a quiet watch cannot be mistaken for a dead one.
	Frequency time.Duration
	// PreDeadlineOffset is how long before a watch's deadline its last bookmark
	// is sent, so a client that reconnects at the deadline resumes from a
	// resourceVersion at most this stale instead of relisting.
	PreDeadlineOffset time.Duration
}

// Next returns when the watcher's next bookmark is due, and false when it
// should get none.
//
// A WatchList watcher whose floor has not been reached is due at once: its
// client is waiting for the bookmark that ends the initial events and there is
// no way to know when the cache will reach the floor, so it is retried every
// slot and the heartbeat does not start until then. Otherwise it is due after
// one frequency, or at the pre-deadline bookmark when that comes first. A watch
// with no deadline (none should exist: clients and the apiserver set one) just
// gets the heartbeat. When the pre-deadline time has already passed there is
// nothing useful left to send; the deadline ends the watch.
func (p Policy) Next(now, deadline time.Time, floorReached bool) (time.Time, bool) {
	if !floorReached {
		return now, true
	}
	next := now.Add(p.Frequency)
	if deadline.IsZero() {
		return next, true
	}
	if preDeadline := deadline.Add(-p.PreDeadlineOffset); preDeadline.Before(next) {
		next = preDeadline
	}
	if next.Before(now) {
		return time.Time{}, false
	}
	return next, true
}

// AfterBookmark is Next for a watcher a tick has just offered its bookmark.
// The calendar hands a slot out up to one granularity early, so a
// pre-deadline bookmark due less than a granularity from now is the one the
// watcher just got: filing it again would send a second bookmark one slot
// later. It then gets none (its deadline comes before any heartbeat).
func (p Policy) AfterBookmark(now, deadline time.Time, floorReached bool, granularity time.Duration) (time.Time, bool) {
	next, ok := p.Next(now, deadline, floorReached)
	if ok && floorReached && !deadline.IsZero() && next.Equal(deadline.Add(-p.PreDeadlineOffset)) && next.Sub(now) < granularity {
		return time.Time{}, false
	}
	return next, ok
}
