package state

import (
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	upstream "k8s.io/apiserver/pkg/storage/cacher/metrics"
	"k8s.io/client-go/tools/cache"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachemetrics"
	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
)

// State is what the cache holds of its resource: the current objects
// (store and ordered index), the past events (history), the past states
// (snapshots), the RV they are at and whether they may be served. The
// Cacher (watchers, dispatch, calendar, the storage feed) changes it only
// through the methods here (the apply path) and reads it through those of
// state_read.go, as upstream's Cacher does its watchCache.
//
// # Invariants
//
//   - rv is the RV of the newest event applied, progress notification
//     heard or (re)list made; it only moves forward, but for a relist,
//     which sets it to the list's RV. advanced, when set, is closed and
//     cleared each time it moves: it is made only when someone waits.
//   - store and ordered hold the same *object values, one per key: the
//     objects of the resource at rv. ordered sorts them by key for lists;
//     store indexes them for the resource's indexers.
//   - history holds every event applied with an RV in (history.startRV,
//     newest], in RV order, none above rv: a watch from any RV at or above
//     startRV resumes from it, one below gets 410. startRV is the (re)list's
//     RV (fromList) until an eviction moves it to the evicted event's; a
//     backfill moves it back, putting etcd's events in front.
//   - An event's prev is what store held under its key before it (see
//     linkPrev), so the history can undo its events back to any RV it
//     covers.
//   - snapshots (only when snapshotting) hold states at RVs at or above
//     history.startRV; each RV they cover is rebuilt from a checkpoint (a
//     copy-on-write clone of ordered) at or after it, or from the current
//     state above the last checkpoint, by undoing the history's events in
//     between. A clone is never written once taken.
//   - current, when set, is a copy-on-write clone of ordered as it is now:
//     taken by the first read that walks the state after a write (or by a
//     checkpoint) and shared by every read until the next write clears it,
//     so a write copies a path of B-tree nodes only after a clone.
//   - ready says whether all of the above is etcd's resource as of rv, to
//     be served: pending until the first list and during a relist or a
//     silent storage watch; stopped for good.
//
// Only the reflector goroutine applies events and relists (apply,
// resetLocked, advance); it reads store without the lock (peek) because
// nobody else writes it. The tick forgets compacted snapshots, a backfill
// prepends to the history's old end, DropHistoryThrough evicts from it.
//
// # Lock
//
// mu guards every field but snapshotting, prefix and metrics (set at New)
// and advanced, which a reader holding the read lock may set (atomically,
// progress) and the writer holding it exclusively clears. It guards the
// state only: a watcher is registered with the hub (hub.go) while Watch
// holds mu's read lock over the state it starts from, and a relist removes
// the watchers in the exclusive hold that replaces the state.
//
// cloneMu guards current among readers: a reader holding mu's read lock
// takes it to set current (currentTreeLocked); a writer holding mu
// exclusively sets and clears current without it.
//
// The lock order is in cacher/doc.go. Methods of State named ...Locked need
// mu held by the caller (exclusively where they change something); the
// others take it themselves.
//
// Without mu, store may be read (peek, keys): the indexer's own lock makes
// each read consistent in itself, one applied event ahead of or behind rv,
// which a write's hint (the storage layer checks the object's RV and
// retries on conflict) and size estimation accept. Anything that must
// match rv (lists, a watch's starting state) reads under mu.
type State struct {
	mu    sync.RWMutex
	ready readiness
	rv    uint64
	// advanced is made by the first waiter (progress) after a move: most
	// writes have nobody waiting for their RV, and a channel a write is
	// an allocation each.
	advanced atomic.Pointer[chan struct{}]
	store    cache.Indexer
	ordered  orderedObjects
	cloneMu  sync.Mutex
	current  orderedObjects
	history  *history
	// snapshots are past states for exact-RV and paginated lists
	// (snapshots.go); empty when snapshotting is off.
	snapshots snapshots

	// snapshotting is whether ListFromCacheSnapshot was on at New.
	snapshotting bool
	// prefix is the resource's key prefix: a list under it is of every
	// object (sizeHint).
	prefix  string
	metrics *cachemetrics.Resource
}

// New is an empty state, pending its first list.
func New(prefix string, indexers *cache.Indexers, window time.Duration, capacity int, snapshotting bool, metrics *cachemetrics.Resource, now time.Time) *State {
	s := &State{
		store:        newStore(indexers),
		ordered:      newOrderedObjects(),
		history:      newHistory(window, capacity),
		snapshots:    snapshots{window: window},
		snapshotting: snapshotting,
		prefix:       prefix,
		metrics:      metrics,
	}
	s.ready.init(now)
	// The bound the history starts at; historyBoundChanged follows it.
	upstream.WatchCacheCapacity.WithLabelValues(metrics.GR.Group, metrics.GR.Resource).Set(float64(s.history.limit))
	return s
}

// The apply path: the reflector's changes. Only the reflector goroutine
// writes the store, the ordered index and the history's newest end.

// Apply records one change (e, linked to what it changed) in the store,
// the ordered index, the history and the snapshots, and moves rv to it.
// forced reports an eviction of an event younger than the window to make
// room (history.add).
func (s *State) Apply(e *objects.Event, now time.Time) (forced bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.Type == watch.Deleted {
		err = s.store.Delete(e.Cur)
	} else {
		err = s.store.Update(e.Cur)
	}
	if err != nil {
		return false, err
	}
	if e.Type == watch.Deleted {
		s.ordered.delete(e.Cur)
	} else {
		s.ordered.set(e.Cur)
	}
	s.current = orderedObjects{}
	bound := s.history.limit
	forced = s.history.add(e, now)
	s.snapshotLocked(e.RV, now)
	if s.history.limit != bound {
		s.metrics.HistoryBoundChanged(bound, s.history.limit)
	}
	s.setRVLocked(e.RV)
	return forced, nil
}

// resetLocked makes objs, a list at rv, the state: the history and the
// snapshots start over there, and the state is ready.
func (s *State) resetLocked(objs []any, rv uint64, now time.Time) error {
	if err := s.store.Replace(objs, strconv.FormatUint(rv, 10)); err != nil {
		return err
	}
	s.ordered.reset(objs)
	s.current = orderedObjects{}
	s.history.reset(rv)
	s.snapshots.reset()
	s.snapshotLocked(rv, now)
	s.rv = 0 // a relist may legitimately land below a progress RV seen earlier
	s.setRVLocked(rv)
	s.ready.set(Ready, now)
	return nil
}

// Relist makes objs, a list at rv, the state (resetLocked). In the same
// exclusive hold, before the swap, endWatchers ends the watchers of the
// state replaced, so none outlives the state it started from; after a
// successful one, listed counts it, so whoever sees the cache ready sees
// it counted.
func (s *State) Relist(objs []any, rv uint64, now time.Time, endWatchers, listed func()) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	endWatchers()
	if err := s.resetLocked(objs, rv, now); err != nil {
		return err
	}
	listed()
	return nil
}

// GoNotReady takes the state out of service: pending until a list or its
// storage watch mends it, or, stopped, for good. alsoLocked runs in the
// same exclusive hold (the Cacher ends its watchers there when the state
// they started from goes, or marks its storage watch silenced). It reports
// whether the state was ready.
func (s *State) GoNotReady(stopped bool, now time.Time, alsoLocked func()) (wasReady bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	wasReady = s.ready.state == Ready
	if stopped {
		s.ready.stop()
	} else {
		s.ready.set(statePending, now)
	}
	if alsoLocked != nil {
		alsoLocked()
	}
	return wasReady
}

// ReleaseLocked lets go of everything the state holds but its RV: the
// objects, the history and the snapshots, for a resource over its memory
// budget (internal/feed/budget.go). The caller holds mu exclusively, in
// the hold that took the state out of service (GoNotReady); a relist
// fills it again.
func (s *State) ReleaseLocked() error {
	if err := s.store.Replace(nil, strconv.FormatUint(s.rv, 10)); err != nil {
		return err
	}
	s.ordered.reset(nil)
	s.current = orderedObjects{}
	s.history.reset(s.rv)
	// Not from a list: no backfill reaches back into a state let go of.
	s.history.fromList = false
	s.snapshots.reset()
	return nil
}

// ReadyAgainIf makes a pending state ready again when answered, asked in
// the same exclusive hold, says its storage watch answered after a
// silence: what it holds is etcd's again. A stopped state stays stopped.
func (s *State) ReadyAgainIf(now time.Time, answered func() bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if answered() && s.ready.state == statePending {
		s.ready.set(Ready, now)
	}
}

// Read runs f under the read lock, for a reader whose reads must agree
// with each other (the ...Locked reads), or that registers something
// atomically with what it read (a watcher, hub.go). f must not wait.
func (s *State) Read(f func()) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	f()
}

// Advance moves rv to a progress notification's rv: nothing changed up to
// it.
func (s *State) Advance(rv uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setRVLocked(rv)
}

// setRVLocked moves rv forward and wakes whoever waits for it.
func (s *State) setRVLocked(rv uint64) {
	if rv <= s.rv {
		return
	}
	s.rv = rv
	if ch := s.advanced.Swap(nil); ch != nil {
		close(*ch)
	}
}

// snapshotLocked records the state at rv, and forgets the snapshots the
// history no longer covers.
func (s *State) snapshotLocked(rv uint64, now time.Time) {
	if !s.snapshotting {
		return
	}
	// apply and resetLocked cleared current before this: a due
	// checkpoint's clone is taken here and serves readers too.
	s.snapshots.add(rv, now, s.currentTreeLocked)
	s.snapshots.forgetBelow(s.history.startRV)
}

// currentTreeLocked is a copy-on-write clone of the current state, to be
// walked without mu: the one taken since the last write, or a new one.
// The caller holds mu, read or write.
func (s *State) currentTreeLocked() orderedObjects {
	s.cloneMu.Lock()
	defer s.cloneMu.Unlock()
	if s.current.tree == nil {
		// Taking a clone writes ordered's copy-on-write context, which
		// only writers (holding mu exclusively) and clones read.
		s.current = s.ordered.clone()
	}
	return s.current
}

// forgetCompactedLocked drops the snapshots etcd's compaction at rev (0:
// none known) made unservable: a list at such an RV goes to etcd, which
// answers 410. Age alone evicts nothing, and the watch history stays: its
// events are the ones etcd sent before the compaction, so a client resuming
// from them gets the stream etcd would have given it then, and upstream's
// cache serves it too (its compactor prunes only the list snapshots).
// Cutting the history here answered 410 to clients that upstream resumes
// (issue 11). It returns the state's RV.
func (s *State) ForgetCompacted(rev int64) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rev > 0 {
		s.snapshots.forgetCompacted(uint64(rev))
	}
	s.metrics.HistoryEvents.Set(float64(s.history.len()))
	return s.rv
}

// DropHistoryThrough evicts the history's events at or below rv, as though
// for room, and the snapshots it no longer covers (DropHistoryThrough).
func (s *State) DropHistoryThrough(rv uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.history.forget(rv)
	s.snapshots.forgetBelow(s.history.startRV)
	s.metrics.HistoryEvents.Set(float64(s.history.len()))
}

// errHistoryMoved: a backfill's events no longer fit where the history
// starts.
var errHistoryMoved = errors.New("the history moved while it was being backfilled")

// PrependHistory puts a backfill's events, etcd's in (from, start], in
// front of the history, if it still starts at the list at start and the
// state is ready (history.prepend).
func (s *State) PrependHistory(events []*objects.Event, from, start uint64, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.history.startRV != start || !s.history.fromList || s.ready.state != Ready {
		return errHistoryMoved
	}
	s.history.prepend(events, from, now)
	return nil
}
