package cacher

import (
	"errors"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	upstream "k8s.io/apiserver/pkg/storage/cacher/metrics"
	"k8s.io/client-go/tools/cache"
)

// cacheState is what the cache holds of its resource: the current objects
// (store and ordered index), the past events (history), the past states
// (snapshots), the RV they are at and whether they may be served.
type cacheState struct {
	// mu guards the fields below, and the Cacher's watchers, calendar and
	// watchLost, which must change atomically with the state.
	mu           sync.RWMutex
	ready        readiness
	rv           uint64
	advanced     chan struct{} // closed and replaced whenever rv moves
	store        cache.Indexer
	ordered      orderedObjects
	history      *history
	snapshots    snapshots
	snapshotting bool
	prefix       string
	metrics      *resourceMetrics
}

// newCacheState is an empty state, pending its first list.
func newCacheState(prefix string, indexers *cache.Indexers, window time.Duration, capacity int, snapshotting bool, metrics *resourceMetrics, now time.Time) *cacheState {
	s := &cacheState{
		advanced:     make(chan struct{}),
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
	upstream.WatchCacheCapacity.WithLabelValues(metrics.gr.Group, metrics.gr.Resource).Set(float64(s.history.limit))
	return s
}

// The apply path: the reflector's changes. Only the reflector goroutine
// writes the store, the ordered index and the history's newest end.

// apply records one change (e, linked to what it changed) in the store,
// the ordered index, the history and the snapshots, and moves rv to it.
// forced reports an eviction of an event younger than the window to make
// room (history.add).
func (s *cacheState) apply(e *event, now time.Time) (forced bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.typ == watch.Deleted {
		err = s.store.Delete(e.cur)
	} else {
		err = s.store.Update(e.cur)
	}
	if err != nil {
		return false, err
	}
	if e.typ == watch.Deleted {
		s.ordered.delete(e.cur)
	} else {
		s.ordered.set(e.cur)
	}
	bound := s.history.limit
	forced = s.history.add(e, now)
	s.snapshotLocked(e.rv, now)
	if s.history.limit != bound {
		s.metrics.historyBoundChanged(bound, s.history.limit)
	}
	s.setRVLocked(e.rv)
	return forced, nil
}

// resetLocked makes objs, a list at rv, the state: the history and the
// snapshots start over there, and the state is ready.
func (s *cacheState) resetLocked(objs []any, rv uint64, now time.Time) error {
	if err := s.store.Replace(objs, strconv.FormatUint(rv, 10)); err != nil {
		return err
	}
	s.ordered.reset(objs)
	s.history.reset(rv)
	s.snapshots.reset()
	s.snapshotLocked(rv, now)
	s.rv = 0 // a relist may legitimately land below a progress RV seen earlier
	s.setRVLocked(rv)
	s.ready.set(stateReady, now)
	return nil
}

// setReadyLocked moves the serving state to st (readiness.set).
func (s *cacheState) setReadyLocked(st readyState, now time.Time) { s.ready.set(st, now) }

// readyAgainLocked makes a pending state ready again: its storage watch
// answered after a silence, so what it holds is etcd's again. A relist in
// progress (also pending) makes it ready itself; a stopped state stays so.
func (s *cacheState) readyAgainLocked(now time.Time) {
	if s.ready.state == statePending {
		s.ready.set(stateReady, now)
	}
}

// stopLocked stops serving for good.
func (s *cacheState) stopLocked() { s.ready.stop() }

// advance moves rv to a progress notification's rv: nothing changed up to
// it.
func (s *cacheState) advance(rv uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setRVLocked(rv)
}

// setRVLocked moves rv forward and wakes whoever waits for it.
func (s *cacheState) setRVLocked(rv uint64) {
	if rv <= s.rv {
		return
	}
	s.rv = rv
	close(s.advanced)
	s.advanced = make(chan struct{})
	s.metrics.setResourceVersion(rv)
}

// snapshotLocked records the state at rv, and forgets the snapshots the
// history no longer covers.
func (s *cacheState) snapshotLocked(rv uint64, now time.Time) {
	if !s.snapshotting {
		return
	}
	s.snapshots.add(rv, s.ordered.clone(), now)
	s.snapshots.forgetBelow(s.history.startRV)
}

// forgetCompactedLocked drops the snapshots etcd's compaction at rev (0:
// none known) made unservable: a list at such an RV goes to etcd, which
// answers 410. Age alone evicts nothing, and the watch history stays: its
// events are the ones etcd sent before the compaction, so a client resuming
// from them gets the stream etcd would have given it then, and upstream's
// cache serves it too (its compactor prunes only the list snapshots).
// Cutting the history here answered 410 to clients that upstream resumes
// (issue 11).
func (s *cacheState) forgetCompactedLocked(rev int64) {
	if rev > 0 {
		s.snapshots.forgetCompacted(uint64(rev))
	}
	s.metrics.historyEvents.Set(float64(s.history.len()))
}

// dropHistoryThrough evicts the history's events at or below rv, as though
// for room, and the snapshots it no longer covers (DropHistoryThrough).
func (s *cacheState) dropHistoryThrough(rv uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.history.forget(rv)
	s.snapshots.forgetBelow(s.history.startRV)
	s.metrics.historyEvents.Set(float64(s.history.len()))
}

// errHistoryMoved: a backfill's events no longer fit where the history
// starts.
var errHistoryMoved = errors.New("the history moved while it was being backfilled")

// prependHistory puts a backfill's events, etcd's in (from, start], in
// front of the history, if it still starts at the list at start and the
// state is ready (history.prepend).
func (s *cacheState) prependHistory(events []*event, from, start uint64, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.history.startRV != start || !s.history.fromList || s.ready.state != stateReady {
		return errHistoryMoved
	}
	s.history.prepend(events, from, now)
	return nil
}
