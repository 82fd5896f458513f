package hub

import (
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/watchkeeper/watchkeeper/bookmarks"
	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
)

// Hub is the fan-out side's registry: the open watchers, filed for the
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
type Hub struct {
	policy      bookmarks.Policy
	granularity time.Duration

	mu       sync.RWMutex
	watchers watcherSet
	calendar *bookmarks.Calendar[*Watcher]
	// stalled is the watchers that fell behind and were taken out of the
	// fan-out (stall.go): the dispatcher never sees them and the tick sends
	// them nothing, only keeps their calendar entries (Refile); their end
	// (Remove, RemoveAll) and their return (Resume) find them here.
	stalled map[*Watcher]struct{}
}

// New is an empty hub whose watchers get bookmarks by policy, on a
// calendar of granularity slots.
func New(policy bookmarks.Policy, granularity time.Duration, clk clock.PassiveClock) *Hub {
	return &Hub{
		policy:      policy,
		granularity: granularity,
		watchers:    newWatcherSet(),
		calendar:    bookmarks.NewCalendar[*Watcher](clk, granularity),
		stalled:     make(map[*Watcher]struct{}),
	}
}

// Add registers w, with sig its matchSignature, and files it on the
// calendar when it takes bookmarks. The caller holds the state's read lock
// over the state w starts from.
func (h *Hub) Add(w *Watcher, sig string, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.watchers.add(w, sig)
	if !w.Bookmarks {
		return
	}
	if next, ok := h.policy.Next(now, w.Deadline, w.floorReached()); ok {
		h.calendar.Add(w, next)
	}
}

// Remove takes w out, stalled or not; false when it was not in. A closed
// watcher may stay on the calendar until its slot comes up: the tick skips
// it.
func (h *Hub) Remove(w *Watcher) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.stalled[w]; ok {
		delete(h.stalled, w)
		return true
	}
	if !h.watchers.has(w) {
		return false
	}
	h.watchers.remove(w)
	return true
}

// RemoveAll takes every watcher out, the stalled ones too, and returns
// them.
func (h *Hub) RemoveAll() []*Watcher {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*Watcher, 0, len(h.watchers.all)+len(h.stalled))
	for w := range h.watchers.all {
		h.watchers.remove(w)
		out = append(out, w)
	}
	for w := range h.stalled {
		out = append(out, w)
	}
	clear(h.stalled)
	return out
}

// Has is whether w is registered (in the fan-out; a stalled one is not).
func (h *Hub) Has(w *Watcher) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.watchers.has(w)
}

// Len is how many watchers are registered.
func (h *Hub) Len() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.watchers.all)
}

// Each calls f for every watcher, under the read lock: f must not wait.
func (h *Hub) Each(f func(w *Watcher)) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for w := range h.watchers.all {
		f(w)
	}
}

// Candidates is watcherSet.candidatesAndShardFiltered under the lock.
func (h *Hub) Candidates(dst []*Watcher, e *objects.Event) ([]*Watcher, int) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.watchers.candidatesAndShardFiltered(dst, e)
}

// HasDueBy is whether a bookmark comes due by t.
func (h *Hub) HasDueBy(t time.Time) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.calendar.HasDueBy(t)
}

// PopDue appends to due the slots of watchers due a bookmark now.
func (h *Hub) PopDue(due [][]*Watcher) [][]*Watcher {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calendar.PopDue(due)
}

// Offer calls send for each watcher of due still registered, under the
// read lock (send never waits), and counts them and how many it sent.
func (h *Hub) Offer(due [][]*Watcher, send func(w *Watcher) bool) (sent, count int) {
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

// Refile puts the watchers of due a tick has just served, those still
// registered or stalled, back on the calendar. A stalled one keeps its
// entry though Offer sent it nothing, so that it has exactly one when it
// comes back (Resume files nothing).
func (h *Hub) Refile(due [][]*Watcher, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, slot := range due {
		for _, w := range slot {
			if !h.watchers.has(w) {
				if _, stalled := h.stalled[w]; !stalled {
					continue
				}
			}
			if next, ok := h.policy.AfterBookmark(now, w.Deadline, w.floorReached(), h.granularity); ok {
				h.calendar.Add(w, next)
			}
		}
	}
}

// CalendarSlots is every filed slot of the calendar, as Inspect shows it.
func (h *Hub) CalendarSlots() []bookmarks.SlotCount {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.calendar.Slots()
}

// CalendarLen is how many calendar entries are filed.
func (h *Hub) CalendarLen() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.calendar.Len()
}
