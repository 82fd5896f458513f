package state

import (
	"iter"
	"time"

	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
)

// MinHistory is the fewest events the history keeps, however old they are
// (upstream's watch cache keeps at least its lower bound, 100).
const MinHistory = 100

// history is the past events a watch can resume from: a ring of events in
// resourceVersion order.
//
// Events leave it only to make room for new ones, never on a timer:
// upstream's cache keeps its buffer until it needs the room, and a client
// must never get a 410 from watchkeeper where upstream's cache, given the
// same window, would resume it. How much room there is follows upstream's
// rule: the bound starts at minHistory, doubles (up to capacity) when it is
// full of events younger than the window, so the window is always covered,
// and halves (down to minHistory) when it is full and its newest quarter is
// older than the window, so a burst that is over gives its memory back. At
// capacity an event younger than the window is evicted all the same, and
// that eviction is reported (forced).
//
// It covers the resourceVersions (startRV, newest]: a watch from any RV at or
// above startRV gets every event after it; one below startRV may have missed
// an event and gets 410 Expired.
type history struct {
	window   time.Duration
	capacity int
	// limit is the current bound, between min(minHistory, capacity) and
	// capacity.
	limit int

	ring  []*objects.Event
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
	return &history{window: window, capacity: capacity, limit: min(MinHistory, capacity)}
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
func (h *history) prepend(events []*objects.Event, from uint64, now time.Time) {
	if len(events) == 0 {
		h.startRV = min(h.startRV, from)
		return
	}
	defer func() { h.limit = max(h.limit, h.count) }()
	if over := len(events) + h.count - h.capacity; over > 0 {
		if over >= len(events) {
			return
		}
		from, events = events[over-1].RV, events[over:]
	}
	stamp := now.UnixNano()
	if h.count > 0 {
		stamp = h.oldest().RecordedNanos
	}
	out := make([]*objects.Event, min(max(16, len(events)+h.count), h.capacity))
	for i, e := range events {
		e.RecordedNanos = stamp
		out[i] = e
	}
	for i := range h.count {
		out[len(events)+i] = h.at(i)
	}
	h.ring, h.head, h.count = out, 0, len(events)+h.count
	h.startRV = from
}

// add appends e, evicting the oldest event when the history is at its
// bound. It reports whether that eviction took an event younger than the
// window, which means clients lose resumability the operator asked for.
func (h *history) add(e *objects.Event, now time.Time) (forced bool) {
	h.adapt(now)
	if h.count == h.limit {
		forced = now.UnixNano()-h.oldest().RecordedNanos < int64(h.window)
		h.evictOldest()
	}
	if h.count == len(h.ring) {
		h.resize(min(max(16, 2*len(h.ring)), h.limit))
	}
	h.ring[(h.head+h.count)%len(h.ring)] = e
	h.count++
	return forced
}

// adapt moves the bound of a full history before an event is added at now:
// up when even the oldest event is inside the window, down when the newest
// quarter is already outside it.
func (h *history) adapt(now time.Time) {
	if h.count < h.limit || h.count == 0 {
		return
	}
	nowNanos, window := now.UnixNano(), int64(h.window)
	if nowNanos-h.oldest().RecordedNanos < window {
		h.limit = min(2*h.limit, h.capacity)
		return
	}
	if nowNanos-h.at(h.count-max(h.limit/4, 1)).RecordedNanos > window {
		smaller := max(h.limit/2, min(MinHistory, h.capacity))
		for h.count > smaller {
			h.evictOldest()
		}
		h.limit = smaller
		if len(h.ring) > 2*max(16, smaller) {
			h.resize(max(16, smaller))
		}
	}
}

// resize moves the events into a ring of n slots, oldest at index 0.
func (h *history) resize(n int) {
	out := make([]*objects.Event, n)
	for i := range h.count {
		out[i] = h.at(i)
	}
	h.ring, h.head = out, 0
}

// forget evicts every event at or below rv, as though for room (see
// Cacher.DropHistoryThrough).
func (h *history) forget(rv uint64) {
	// Only what was evicted moves the start: with no event at or below rv,
	// every resume servable before stays servable.
	for h.count > 0 && h.oldest().RV <= rv {
		h.evictOldest()
	}
}

func (h *history) oldest() *objects.Event { return h.ring[h.head] }

func (h *history) evictOldest() {
	e := h.ring[h.head]
	h.ring[h.head] = nil
	h.startRV = e.RV
	h.fromList = false
	h.head = (h.head + 1) % len(h.ring)
	h.count--
}

// since returns the events after rv, oldest first, and false when rv is
// older than the history covers.
func (h *history) since(rv uint64) ([]*objects.Event, bool) {
	lo, ok := h.firstAfter(rv)
	if !ok {
		return nil, false
	}
	out := make([]*objects.Event, 0, h.count-lo)
	for i := lo; i < h.count; i++ {
		out = append(out, h.at(i))
	}
	return out, true
}

// after is the events above rv, oldest first, read in place rather than
// copied out (a stalled watcher's catch-up takes a chunk of them); false
// when rv is older than the history covers. It is valid while the caller
// holds the state's lock.
func (h *history) after(rv uint64) (iter.Seq[*objects.Event], bool) {
	lo, ok := h.firstAfter(rv)
	if !ok {
		return nil, false
	}
	return func(yield func(*objects.Event) bool) {
		for i := lo; i < h.count; i++ {
			if !yield(h.at(i)) {
				return
			}
		}
	}, true
}

// firstAfter is the index of the oldest event above rv (count if none);
// false when rv is older than the history covers.
func (h *history) firstAfter(rv uint64) (int, bool) {
	if rv < h.startRV {
		return 0, false
	}
	// Events are in RV order: find the first one above rv by binary search.
	lo, hi := 0, h.count
	for lo < hi {
		mid := (lo + hi) / 2
		if h.at(mid).RV <= rv {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo, true
}

func (h *history) at(i int) *objects.Event { return h.ring[(h.head+i)%len(h.ring)] }

func (h *history) len() int { return h.count }

// span reports the oldest and newest retained events, for debugging.
func (h *history) span() (oldest, newest *objects.Event) {
	if h.count == 0 {
		return nil, nil
	}
	return h.oldest(), h.at(h.count - 1)
}
