package cacher

import (
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/watchkeeper/watchkeeper/bookmarks"
	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
)

// hub is the fan-out side's registry: the open watchers, filed for the
// dispatcher (watcherSet), and the bookmark calendar. Its lock is its own:
// the dispatcher looks up an event's watchers and the tick pops its due
// watchers without waiting on the state's lock, so neither a relist's
// apply nor a watch building its initial events holds them up, and a
// registration holds the dispatcher up only for the add itself.
//
// A watcher is registered while the caller holds the state's lock (its
// read lock is enough), as etcd's watchableStore registers a watcher under
// its store's lock: the reflector applies an event under the state's
// write lock and only then hands it to the dispatcher, so an event applied
// before the registration is at or below the watcher's startRV and skipped
// for it, and one applied after finds it; none is missed or sent twice. A
// relist removes the watchers in the state's write hold that replaces the
// state they started from.
//
// Lock order (doc.go): the state's mu, then mu, then a watcher's mu.
type hub struct {
	policy      bookmarks.Policy
	granularity time.Duration

	mu       sync.RWMutex
	watchers watcherSet
	calendar *bookmarks.Calendar[*watcher]
}

func newHub(policy bookmarks.Policy, granularity time.Duration, clk clock.PassiveClock) *hub {
	return &hub{
		policy:      policy,
		granularity: granularity,
		watchers:    newWatcherSet(),
		calendar:    bookmarks.NewCalendar[*watcher](clk, granularity),
	}
}

// add registers w, with sig its matchSignature, and files it on the
// calendar when it takes bookmarks. The caller holds the state's read lock
// over the state w starts from.
func (h *hub) add(w *watcher, sig string, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.watchers.add(w, sig)
	if !w.bookmarks {
		return
	}
	if next, ok := h.policy.Next(now, w.deadline, w.floorReached()); ok {
		h.calendar.Add(w, next)
	}
}

// remove takes w out; false when it was not in. A closed watcher may stay
// on the calendar until its slot comes up: the tick skips it.
func (h *hub) remove(w *watcher) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.watchers.has(w) {
		return false
	}
	h.watchers.remove(w)
	return true
}

// removeAll takes every watcher out and returns them.
func (h *hub) removeAll() []*watcher {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*watcher, 0, len(h.watchers.all))
	for w := range h.watchers.all {
		h.watchers.remove(w)
		out = append(out, w)
	}
	return out
}

func (h *hub) has(w *watcher) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.watchers.has(w)
}

func (h *hub) len() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.watchers.all)
}

// each calls f for every watcher, under the read lock: f must not wait.
func (h *hub) each(f func(w *watcher)) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for w := range h.watchers.all {
		f(w)
	}
}

// candidates is watcherSet.candidatesAndShardFiltered under the lock.
func (h *hub) candidates(dst []*watcher, e *objects.Event) ([]*watcher, int) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.watchers.candidatesAndShardFiltered(dst, e)
}

// hasDueBy is whether a bookmark comes due by t.
func (h *hub) hasDueBy(t time.Time) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.calendar.HasDueBy(t)
}

// popDue appends to due the slots of watchers due a bookmark now.
func (h *hub) popDue(due [][]*watcher) [][]*watcher {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calendar.PopDue(due)
}

// offer calls send for each watcher of due still registered, under the
// read lock (send never waits), and counts them and how many it sent.
func (h *hub) offer(due [][]*watcher, send func(w *watcher) bool) (sent, count int) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, slot := range due {
		for _, w := range slot {
			count++
			if h.watchers.has(w) && send(w) {
				sent++
			}
		}
	}
	return sent, count
}

// refile puts the watchers of due a tick has just served, those still
// registered, back on the calendar.
func (h *hub) refile(due [][]*watcher, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, slot := range due {
		for _, w := range slot {
			if !h.watchers.has(w) {
				continue
			}
			if next, ok := h.policy.AfterBookmark(now, w.deadline, w.floorReached(), h.granularity); ok {
				h.calendar.Add(w, next)
			}
		}
	}
}

// calendarSlots and calendarLen are the calendar as Inspect and tests see it.
func (h *hub) calendarSlots() []bookmarks.SlotCount {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.calendar.Slots()
}

func (h *hub) calendarLen() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.calendar.Len()
}
