package cacher

import "time"

// history is the window of past events a watch can resume from: a ring of
// events in resourceVersion order, bounded by age (the window) and by count
// (the capacity, a guard against write storms).
//
// It covers the resourceVersions (startRV, newest]: a watch from any RV at or
// above startRV gets every event after it; one below startRV may have missed
// an event and gets 410 Expired.
type history struct {
	window   time.Duration
	capacity int

	ring  []*event
	head  int // index of the oldest event
	count int
	// startRV is the RV just before the oldest retained event: the RV of the
	// last evicted event, or of the list the cache was (re)built from.
	startRV uint64
	// fromList is whether startRV is still the (re)list's RV, nothing having
	// been evicted since: then what came before it is a gap etcd can fill
	// (backfill.go), not history given up.
	fromList bool
}

func newHistory(window time.Duration, capacity int) *history {
	return &history{window: window, capacity: capacity}
}

// reset empties the history after a (re)list at rv.
func (h *history) reset(rv uint64) {
	h.ring, h.head, h.count = nil, 0, 0
	h.startRV = rv
	h.fromList = true
}

// prepend puts events from before the history's start (in RV order, all
// above from and at or below startRV) in front of it and moves the start
// back to from. Within the capacity the newest are kept. They take the
// recorded time of the oldest event held (or now), so the window ages them
// out no later than what followed them.
func (h *history) prepend(events []*event, from uint64, now time.Time) {
	if len(events) == 0 {
		h.startRV = min(h.startRV, from)
		return
	}
	if over := len(events) + h.count - h.capacity; over > 0 {
		if over >= len(events) {
			return
		}
		from, events = events[over-1].rv, events[over:]
	}
	stamp := now.UnixNano()
	if h.count > 0 {
		stamp = h.oldest().recordedNanos
	}
	out := make([]*event, min(max(16, len(events)+h.count), h.capacity))
	for i, e := range events {
		e.recordedNanos = stamp
		out[i] = e
	}
	for i := range h.count {
		out[len(events)+i] = h.at(i)
	}
	h.ring, h.head, h.count = out, 0, len(events)+h.count
	h.startRV = from
}

// add appends e, evicting the oldest event when the capacity is reached. It
// reports whether that eviction took an event younger than the window, which
// means clients lose resumability the operator asked for.
func (h *history) add(e *event, now time.Time) (forced bool) {
	if h.count == h.capacity {
		forced = now.UnixNano()-h.oldest().recordedNanos < int64(h.window)
		h.evictOldest()
	}
	if h.count == len(h.ring) {
		h.resize(min(max(16, 2*len(h.ring)), h.capacity))
	}
	h.ring[(h.head+h.count)%len(h.ring)] = e
	h.count++
	return forced
}

// resize moves the events into a ring of n slots, oldest at index 0.
func (h *history) resize(n int) {
	out := make([]*event, n)
	for i := range h.count {
		out[i] = h.at(i)
	}
	h.ring, h.head = out, 0
}

// expire evicts every event older than the window.
func (h *history) expire(now time.Time) {
	limit := now.UnixNano() - int64(h.window)
	for h.count > 0 && h.oldest().recordedNanos < limit {
		h.evictOldest()
	}
	// Give back the memory a burst of writes took once it has aged out.
	if len(h.ring) > 1024 && h.count < len(h.ring)/4 {
		h.resize(len(h.ring) / 2)
	}
}

// forget evicts every event at or below rv: etcd compacted past it, so a
// client resuming there must relist rather than be served from memory what
// etcd itself no longer has.
func (h *history) forget(rv uint64) {
	for h.count > 0 && h.oldest().rv <= rv {
		h.evictOldest()
	}
	if rv > h.startRV && h.count == 0 {
		h.startRV = rv
		h.fromList = false
	}
}

func (h *history) oldest() *event { return h.ring[h.head] }

func (h *history) evictOldest() {
	e := h.ring[h.head]
	h.ring[h.head] = nil
	h.startRV = e.rv
	h.fromList = false
	h.head = (h.head + 1) % len(h.ring)
	h.count--
}

// since returns the events after rv, oldest first, and false when rv is
// older than the history covers.
func (h *history) since(rv uint64) ([]*event, bool) {
	if rv < h.startRV {
		return nil, false
	}
	// Events are in RV order: find the first one above rv by binary search.
	lo, hi := 0, h.count
	for lo < hi {
		mid := (lo + hi) / 2
		if h.at(mid).rv <= rv {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	out := make([]*event, 0, h.count-lo)
	for i := lo; i < h.count; i++ {
		out = append(out, h.at(i))
	}
	return out, true
}

func (h *history) at(i int) *event { return h.ring[(h.head+i)%len(h.ring)] }

func (h *history) len() int { return h.count }

// span reports the oldest and newest retained events, for debugging.
func (h *history) span() (oldest, newest *event) {
	if h.count == 0 {
		return nil, nil
	}
	return h.oldest(), h.at(h.count - 1)
}
