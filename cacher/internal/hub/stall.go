package hub

import (
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/watch"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachemetrics"
	"github.com/watchkeeper/watchkeeper/watchlist"
)

// Stall and resume (upstream's KEP-6268 proposes the same, behind a gate
// that is off). A watcher whose client falls behind (roomLocked: its queue
// full, or nothing taken for SlowClientTimeout) is not closed: it gives up
// its queue, keeps its position (sentRV, the RV its client's channel took
// last), leaves the fan-out, and is fed again from the history once its
// client has read what was kept for it. It is closed with 410 only when the
// history no longer holds its position, which is what its client would get
// from a new watch from there. The cache drives the catch-up (its stall.go:
// the history is the state's); this file is the watcher's and the hub's
// side of it.
//
// Why this is never worse for a client: a closed watch's client resumes from
// the same position, over a new request, and is served the same history (or
// the same 410); a stalled one is served it without the reconnect, and
// without the herd of reconnects upstream's cache sees when many watchers
// are closed at once. What it trades is on the server's side: a client that
// never reads again keeps its watch (its HTTP stream, the handler's
// goroutine, the watcher's pump and one event) until its deadline or its
// context ends, where a closed one lets go at once; hence the flag
// (--watch-cache-stall-slow-watchers) that turns it off.
//
// The rules, and why:
//   - Nothing is lost, sent twice or out of order. The stall keeps, of the
//     queue, what the history cannot give back (the initial events not
//     delivered: they are a state, not events; and, when the
//     initial-events-end bookmark is queued, everything up to it, so it
//     reaches the client where it stood) and at least the event the pump is
//     handing over (its send is how the watcher learns that its client reads
//     again). The position is the RV of the last of them, once delivered;
//     every event after it is in the history or dispatched later, and the
//     catch-up starts exactly after it.
//   - No gap at the return. The last chunk of the catch-up (the history's
//     events up to the state's RV) is queued and the watcher registered with
//     the hub in one hold of the state's read lock, with StartRV the state's
//     RV, as a new watcher is registered: events applied before are in the
//     chunk, and the dispatcher skips them; events applied after find the
//     watcher in the hub.
//   - Bookmarks never overtake events. A stalled watcher is out of the hub:
//     neither the tick nor the shutdown's bookmarks offer it one (a bookmark
//     at the dispatched RV would claim events it has not had). After its
//     return a bookmark carries at least its StartRV, every event at or
//     below which is queued ahead of it.
//   - Bounded memory. The catch-up is fed in chunks of at most half the
//     queue bound (CatchUpChunk), each once the client took the last, so a
//     stalled watcher holds at most one chunk, and one whose client never
//     reads again only its position and the one event its pump holds. The
//     other half leaves room for live events after the last chunk.
//   - The dispatcher never waits: a stall is a move between two sets of the
//     hub and a cut of the watcher's queue; the history is read on the
//     watcher's own pump.
//   - Every end of a watch ends a stalled one too: Stop, its context, the
//     cache's Stop, a relist and the shutdown's drain find it in the hub's
//     stalled set (Remove, RemoveAll); its pump ends with it.

// CatchUpChunk is the most events of the history a stalled watcher is fed
// at once: half its queue bound, so the last chunk leaves as much room for
// the live events that follow it.
func CatchUpChunk(buffer int) int { return max(buffer/2, 1) }

// Stall takes w out of the fan-out and keeps it as stalled; false when it
// is not registered (it is ending).
func (h *Hub) Stall(w *Watcher) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.watchers.has(w) {
		return false
	}
	h.watchers.remove(w)
	h.stalled[w] = struct{}{}
	return true
}

// Resume registers a stalled w again, under its match class's signature;
// its calendar entry is the one it had (Refile keeps a stalled watcher's).
// False when it is no longer stalled (it is ending). As Add, the caller
// holds the state's read lock over the state w resumes from.
func (h *Hub) Resume(w *Watcher) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.stalled[w]; !ok {
		return false
	}
	delete(h.stalled, w)
	h.watchers.add(w, w.class.sig)
	return true
}

// StalledLen is how many watchers are stalled.
func (h *Hub) StalledLen() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.stalled)
}

// IsStalled is whether w is among the stalled.
func (h *Hub) IsStalled(w *Watcher) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	_, ok := h.stalled[w]
	return ok
}

// Stalled is whether the watcher is stalled: out of the fan-out, waiting
// for its client to read what was kept for it.
func (w *Watcher) Stalled() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state == watcherStalled
}

// Stall gives up the queue of a watcher that fell behind, but for what the
// history cannot give back (see the rules above), and marks it stalled. It
// reports how many events it kept, and false when the watcher is not open.
// Its pump is running (events were queued) or, if its client has taken
// everything since, is started, to feed it at once.
func (w *Watcher) Stall(nowNanos int64) (kept int, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != watcherOpen {
		return 0, false
	}
	queued := w.queuedLocked()
	keep := min(queued, max(w.initialLeft, 1))
	if w.Tracker.State() == watchlist.BookmarkReceived {
		// The initial-events-end bookmark is queued, the only bookmark
		// while it is: keep it and what is ahead of it.
		for i := w.head + keep; i < len(w.queue); i++ {
			if w.queue[i].Type == watch.Bookmark {
				keep = i - w.head + 1
				break
			}
		}
	}
	end := w.head + keep
	liveFrom, liveEnd := max(w.head-w.timedFrom, 0), max(end-w.timedFrom, 0)
	if keep <= smallQueue {
		// Out of the arrays a burst made large, so they are let go.
		w.queue = slices.Clone(w.queue[w.head:end])
		w.live = slices.Clone(w.live[liveFrom:liveEnd])
		w.timedFrom = max(w.timedFrom-w.head, 0)
		w.head = 0
	} else {
		// Mostly initial events: cutting is cheaper than copying them.
		clear(w.queue[end:])
		w.queue = w.queue[:end]
		w.live = w.live[:liveEnd]
	}
	w.state = watcherStalled
	w.stalledNanos = nowNanos
	if !w.pumping {
		w.startPumpLocked()
	}
	return keep, true
}

// Closed is closed once the watcher is: a feed that waits on something
// else for a stalled watcher (an etcd watch, for a resource over its memory
// budget) waits on it too. Nil before the watcher's first pump, and a
// stalled watcher has one.
func (w *Watcher) Closed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.done
}

// Position is where a stalled watcher whose client took everything kept for
// it resumes: after the RV it returns. False when it is not stalled, or
// still has events queued.
func (w *Watcher) Position() (uint64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != watcherStalled || w.queuedLocked() > 0 {
		return 0, false
	}
	return w.sentRV, true
}

// Chunk is a part of a stalled watcher's catch-up, built from the history
// under the state's read lock: the events its client is sent, untimed.
type Chunk struct {
	queue []watch.Event
	live  []queuedLive
}

// Add appends ev, the event at rv.
func (c *Chunk) Add(ev watch.Event, rv uint64) {
	c.queue = append(c.queue, ev)
	c.live = append(c.live, queuedLive{rv: rv})
}

// Refill queues a chunk of the history for a stalled watcher, which stays
// stalled, through the RV of the last history event the chunk looked at:
// the next chunk starts after through, once this one is taken (an event of
// the watcher's after its last one that could not be built is not looked
// at again).
func (w *Watcher) Refill(c Chunk, through uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != watcherStalled {
		return // ending
	}
	w.queue, w.head, w.live, w.timedFrom = c.queue, 0, c.live, 0
	w.sentRV = max(w.sentRV, through)
}

// Rejoin queues the last chunk of a stalled watcher's catch-up, which
// reaches the state's RV rv, and opens it again from rv: the caller then
// registers it with the hub (Resume) in the same hold of the state's read
// lock. A WatchList watcher still waiting for its initial-events-end
// bookmark gets it behind the chunk when rv is at its floor, as a new
// watcher gets its own; below the floor it waits on, for the tick. False
// when the watcher is no longer stalled (it is ending).
func (w *Watcher) Rejoin(c Chunk, rv uint64, nowNanos int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != watcherStalled {
		return false
	}
	if w.Tracker.State() == watchlist.WaitingForBookmark && rv >= w.Tracker.Floor() {
		end, err := w.Env.EndBookmark(rv)
		if err != nil {
			// The tick offers it again.
			w.Env.Dropped(cachemetrics.DropBookmark, rv, err)
		} else {
			w.Tracker.Accept(rv)
			w.Env.Moved(watchlist.WaitingForBookmark, watchlist.BookmarkReceived)
			c.Add(watch.Event{Type: watch.Bookmark, Object: end}, rv)
		}
	}
	w.queue, w.head, w.live, w.timedFrom = c.queue, 0, c.live, 0
	w.StartRV = rv
	w.state = watcherOpen
	// The client took an event just now: the slow-client clock starts
	// over.
	w.blockedSinceNanos, w.seenTaken = nowNanos, w.taken
	return true
}

// Expire ends a stalled watcher with ev (the 410) once its client reads it,
// and reports how long the watcher was stalled; false when it is not
// stalled.
func (w *Watcher) Expire(ev watch.Event, nowNanos int64) (time.Duration, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != watcherStalled {
		return 0, false
	}
	// Untimed and not live: no position to keep.
	w.queue, w.head, w.live, w.timedFrom = []watch.Event{ev}, 0, nil, 1
	w.state = watcherDraining
	return time.Duration(nowNanos - w.stalledNanos), true
}
