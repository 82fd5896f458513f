package cacher

import (
	"sync"
	"time"

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
}

// newCacheState is an empty state, pending its first list.
func newCacheState(indexers *cache.Indexers, window time.Duration, capacity int, snapshotting bool, now time.Time) *cacheState {
	s := &cacheState{
		advanced:     make(chan struct{}),
		store:        newStore(indexers),
		ordered:      newOrderedObjects(),
		history:      newHistory(window, capacity),
		snapshots:    snapshots{window: window},
		snapshotting: snapshotting,
	}
	s.ready.init(now)
	return s
}
