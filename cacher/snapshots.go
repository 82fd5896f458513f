package cacher

import (
	"sort"
	"time"
)

// snapshots are the cache's past states, one per RV it applied an event
// at: copy-on-write clones of the ordered objects, so one costs the nodes a
// later write copies, not a copy of the store. They serve lists at an exact
// RV and the later pages of a paginated list (whose continue token carries
// the RV of its first page) from memory, as upstream's cache does since
// ListFromCacheSnapshot. Cacher.mu guards them.
//
// A snapshot is kept while the history covers its RV and it is younger
// than the window; the newest is always kept.
type snapshots struct {
	window time.Duration
	// In RV order; at[i] is when rvs[i] was applied.
	rvs   []uint64
	at    []time.Time
	trees []orderedObjects
}

// add records the state at rv; rvs only grow.
func (s *snapshots) add(rv uint64, tree orderedObjects, now time.Time) {
	if n := len(s.rvs); n > 0 && s.rvs[n-1] >= rv {
		s.trees[n-1], s.at[n-1] = tree, now // the same RV again: the newer state
		return
	}
	s.rvs = append(s.rvs, rv)
	s.at = append(s.at, now)
	s.trees = append(s.trees, tree)
	// Age out: what the window no longer covers (the newest stays).
	old := 0
	for old < len(s.rvs)-1 && now.Sub(s.at[old]) > s.window {
		old++
	}
	s.drop(old)
}

// forgetBelow drops the snapshots of RVs below rv: the history no longer
// covers them, so the cache could not say what followed them either.
func (s *snapshots) forgetBelow(rv uint64) {
	s.drop(sort.Search(len(s.rvs), func(i int) bool { return s.rvs[i] >= rv }))
}

func (s *snapshots) drop(n int) {
	if n == 0 {
		return
	}
	clear(s.trees[:n])
	s.rvs, s.at, s.trees = s.rvs[n:], s.at[n:], s.trees[n:]
	if cap(s.rvs) > 64 && len(s.rvs) < cap(s.rvs)/4 {
		s.rvs, s.at, s.trees = append([]uint64(nil), s.rvs...), append([]time.Time(nil), s.at...), append([]orderedObjects(nil), s.trees...)
	}
}

// reset forgets every snapshot, after a relist.
func (s *snapshots) reset() { s.rvs, s.at, s.trees = nil, nil, nil }

// stateAt is the state at rv: the snapshot of the newest RV at or below it,
// which nothing changed after up to rv. The caller checks rv is not ahead
// of the cache. False when rv is older than every snapshot.
func (s *snapshots) stateAt(rv uint64) (orderedObjects, bool) {
	i := sort.Search(len(s.rvs), func(i int) bool { return s.rvs[i] > rv })
	if i == 0 {
		return orderedObjects{}, false
	}
	return s.trees[i-1], true
}

func (s *snapshots) len() int { return len(s.rvs) }
