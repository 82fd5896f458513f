package state

import (
	"context"
	"iter"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apiserver/pkg/storage"

	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
)

// The state's reads. Methods named ...Locked need the caller to hold mu
// (the read lock at least); the others take it themselves.

// IsReady is whether the state may be served.
func (s *State) IsReady() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.ready.state == Ready
}

// Readiness is the serving state, since when it has not been ready (for
// Retry-After), and a channel closed at its next change.
func (s *State) Readiness() (state readyState, since time.Time, changed <-chan struct{}) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.ready.state, s.ready.since, s.ready.changed
}

// NotReadyLocked is whether the state may not be served, and since when.
func (s *State) NotReadyLocked() (since time.Time, notReady bool) {
	return s.ready.since, s.ready.state != Ready
}

// CurrentRV is the RV of the newest event or progress applied.
func (s *State) CurrentRV() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.rv
}

// RVLocked is the RV of the newest event or progress applied.
func (s *State) RVLocked() uint64 { return s.rv }

// Progress is rv and a channel closed when it next moves. Readers holding
// the read lock race only with each other to make the channel; the writer
// that moves rv holds the lock exclusively.
func (s *State) Progress() (rv uint64, advanced <-chan struct{}) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ch := s.advanced.Load()
	if ch == nil {
		made := make(chan struct{})
		if s.advanced.CompareAndSwap(nil, &made) {
			ch = &made
		} else {
			ch = s.advanced.Load()
		}
	}
	return s.rv, *ch
}

// Peek is the object held under key, nil if none, read without mu: the
// indexer's own lock makes the read consistent in itself, but it may be one
// applied event ahead of or behind rv. The reflector, the one writer, reads
// exactly what it last applied; a write's hint (suggestion) accepts either.
func (s *State) Peek(key string) *objects.Object {
	if item, ok, _ := s.store.GetByKey(key); ok {
		return item.(*objects.Object)
	}
	return nil
}

// Keys lists the keys held, without mu (see peek): for size estimation.
func (s *State) Keys() []string { return s.store.ListKeys() }

// Get is the object held under key and the RV of the state it was read in.
func (s *State) Get(key string) (*objects.Object, bool, uint64) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	item, ok, _ := s.store.GetByKey(key)
	if !ok {
		return nil, false, s.rv
	}
	return item.(*objects.Object), true, s.rv
}

// ListCurrent is what a list of the current state under key, from the key
// start on, walks: the objects in key order (about hint of them, 0 if
// unknown), the index that narrowed them ("" if none), and the state's RV.
// Read under the read lock; the walk is done after it.
func (s *State) ListCurrent(ctx context.Context, key, start string, opts storage.ListOptions) (walk iter.Seq[*objects.Object], hint int, index string, rv uint64) {
	s.mu.RLock()
	objs, index := s.indexedLocked(ctx, key, opts)
	switch {
	case index != "":
	case !opts.Recursive:
		objs = s.ObjectsLocked(key, false)
	case s.snapshotting && s.snapshots.len() > 0:
		// A clone of the current state is never written: it is walked
		// after the lock, and nothing is collected but what is listed.
		current := s.currentTreeLocked()
		walk, hint = current.ascend(key, start), s.SizeHint(key, current)
	default:
		// No snapshots (ListFromCacheSnapshot off): the objects are
		// collected under the lock.
		objs = slices.AppendSeq(make([]*objects.Object, 0, s.SizeHint(key, s.ordered)), s.ordered.ascend(key, start))
		start = key
	}
	rv = s.rv
	s.mu.RUnlock()
	if walk == nil {
		if start != key {
			objs = objs[sort.Search(len(objs), func(i int) bool { return objs[i].Key >= start }):]
		}
		walk, hint = slices.Values(objs), len(objs)
	}
	return walk, hint, index, rv
}

// SizeHint is how many objects a list of everything under key in tree may
// hold: all of them for the whole resource, else unknown (0).
func (s *State) SizeHint(key string, tree orderedObjects) int {
	if strings.TrimSuffix(key, "/") == strings.TrimSuffix(s.prefix, "/") {
		return tree.len()
	}
	return 0
}

// ObjectsLocked returns the objects held under key, sorted by key.
func (s *State) ObjectsLocked(key string, recursive bool) []*objects.Object {
	if !recursive {
		item, ok, _ := s.store.GetByKey(key)
		if !ok {
			return nil
		}
		return []*objects.Object{item.(*objects.Object)}
	}
	return s.ordered.under(key)
}

// indexedLocked narrows a recursive list with the first of the resource's
// indexers that the selector pins to one value (pods on one node, objects in
// one namespace), instead of scanning every object. The predicate still
// runs on what it returns.
//
// It returns the objects and the index's name, "" when no index applies.
func (s *State) indexedLocked(ctx context.Context, key string, opts storage.ListOptions) ([]*objects.Object, string) {
	if !opts.Recursive {
		return nil, ""
	}
	indexers := s.store.GetIndexers()
	for _, mv := range opts.Predicate.MatcherIndex(ctx) {
		if _, ok := indexers[mv.IndexName]; !ok {
			continue
		}
		items, err := s.store.ByIndex(mv.IndexName, mv.Value)
		if err != nil {
			return nil, ""
		}
		out := make([]*objects.Object, 0, len(items))
		for _, item := range items {
			if o := item.(*objects.Object); strings.HasPrefix(o.Key, key) {
				out = append(out, o)
			}
		}
		SortObjects(out)
		return out, mv.IndexName
	}
	return nil, ""
}

// StartingState is the state a watch under key starts from, the objects
// sorted by key, and its RV; false (with since) when the state is not
// ready. The read lock is held only to take a copy-on-write clone of the
// ordered objects (O(1), shared with every reader since the last write),
// or for an index lookup when the selector pins
// an indexed field (spec.nodeName for a kubelet's pods: only that node's
// pods are read), or for a single key; the walk under the prefix is done
// outside it, so an informer start storm does not hold up the reflector,
// lists and Gets for the length of a full scan each.
func (s *State) StartingState(ctx context.Context, key string, opts storage.ListOptions) (objs []*objects.Object, rv uint64, since time.Time, ok bool) {
	s.mu.RLock()
	if s.ready.state != Ready {
		s.mu.RUnlock()
		return nil, 0, s.ready.since, false
	}
	rv = s.rv
	var clone orderedObjects
	switch indexed, index := s.indexedLocked(ctx, key, opts); {
	case !opts.Recursive:
		objs = s.ObjectsLocked(key, false)
	case index != "":
		objs = indexed
	default:
		clone = s.currentTreeLocked()
	}
	s.mu.RUnlock()
	if clone.tree != nil {
		objs = clone.under(key)
	}
	return objs, rv, time.Time{}, true
}

// HistoryStart is the RV a resume must be at or above (history.startRV),
// and whether it is still the (re)list's (history.fromList): then what came
// before it is a gap a backfill can fill.
func (s *State) HistoryStart() (start uint64, fromList bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.history.startRV, s.history.fromList
}

// HistoryStartLocked is the RV a resume must be at or above.
func (s *State) HistoryStartLocked() uint64 { return s.history.startRV }

// SinceLocked returns the history's events after rv, oldest first, and
// false when rv is older than the history covers.
func (s *State) SinceLocked(rv uint64) ([]*objects.Event, bool) { return s.history.since(rv) }

// AfterLocked is the history's events after rv, oldest first, read in place
// while the caller holds the lock; false when rv is older than the history
// covers.
func (s *State) AfterLocked(rv uint64) (iter.Seq[*objects.Event], bool) { return s.history.after(rv) }

// eventsBetweenLocked returns the history's events above after and at or
// below upTo, oldest first; false if the history no longer holds them all.
func (s *State) eventsBetweenLocked(after, upTo uint64) ([]*objects.Event, bool) {
	h := s.history
	if after < h.startRV {
		return nil, false
	}
	if after >= upTo {
		return nil, true
	}
	first := sort.Search(h.count, func(i int) bool { return h.at(i).RV > after })
	end := first + sort.Search(h.count-first, func(i int) bool { return h.at(first+i).RV > upTo })
	out := make([]*objects.Event, end-first)
	for i := range out {
		out[i] = h.at(first + i)
	}
	return out, true
}

// HasStateAt is whether the snapshots hold the state at rv, which the
// state has reached and etcd has not compacted (at compacted; etcd's store
// answers those 410 without a request, as it would for the cache).
func (s *State) HasStateAt(rv uint64, compacted int64) bool {
	if rv == 0 || int64(rv) < compacted {
		return false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return rv <= s.rv && s.ready.state == Ready && s.snapshots.covers(rv)
}

// SnapshotAt is the state at rv (see hasStateAt): the checkpoint at or
// after it, and the history's events between them to undo.
func (s *State) SnapshotAt(rv uint64, compacted int64) (pastState, bool) {
	if rv == 0 || int64(rv) < compacted {
		return pastState{}, false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if rv > s.rv || s.ready.state != Ready {
		return pastState{}, false
	}
	at, from, ok := s.snapshots.checkpointFor(rv)
	if !ok {
		return pastState{}, false
	}
	if from.tree.tree == nil {
		from.tree = s.currentTreeLocked()
	}
	events, ok := s.eventsBetweenLocked(at, from.rv)
	if !ok {
		return pastState{}, false
	}
	return pastState{Tree: from.tree, undo: undoSince(events)}, true
}

// ObjectRVs is each held object's RV (read with v) by key and the state's
// RV, for the consistency check; false when the state is not ready. It
// stops at the first error.
func (s *State) ObjectRVs(v storage.Versioner) (map[string]uint64, uint64, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.ready.state != Ready {
		return nil, 0, false, nil
	}
	cached := map[string]uint64{}
	var err error
	for _, o := range s.ordered.under(s.prefix) {
		if cached[o.Key], err = o.RV(v); err != nil {
			break
		}
	}
	return cached, s.rv, true, err
}

// inspect is what Inspect shows of the state.
// historyStats is what Inspect shows of the history and the snapshots;
// cacher.HistoryInspection is the same struct, public, and documents it.
type HistoryStats struct {
	Events, Capacity, Bound int
	Window                  time.Duration
	OldestRV, NewestRV      uint64
	OldestAt, NewestAt      time.Time
	StartRV                 uint64
	Snapshots               int
}

// Inspect is the state's readiness, RV and history, read in one hold.
func (s *State) Inspect() (ready bool, rv uint64, hi HistoryStats) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	h := s.history
	hi = HistoryStats{Events: h.len(), Capacity: h.capacity, Bound: h.limit, Window: h.window, StartRV: h.startRV,
		Snapshots: s.snapshots.len()}
	if oldest, newest := h.span(); oldest != nil {
		hi.OldestRV, hi.NewestRV = oldest.RV, newest.RV
		hi.OldestAt, hi.NewestAt = time.Unix(0, oldest.RecordedNanos), time.Unix(0, newest.RecordedNanos)
	}
	return s.ready.state == Ready, s.rv, hi
}

// SnapshotCounts is how many past states the snapshots cover, and how
// many clones of the ordered index they keep for it.
func (s *State) SnapshotCounts() (snapshots, clones int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.snapshots.len(), len(s.snapshots.checkpoints)
}

// SnapshotsOn is whether the state keeps snapshots (fixed at creation).
func (s *State) SnapshotsOn() bool { return s.snapshotting }

// ObjectCount is the number of objects held.
func (s *State) ObjectCount() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.ordered.len()
}

// AtHistoryStartLocked is the object at key in the state at the history's
// start, nil if none: the one its first event in the history changed, or
// the one held now if the history has no event of it. Only a watch of one
// object resuming from before the history asks (resume_single.go), which
// would otherwise wait for a backfill or get its 410: the scan is bounded
// by the history's capacity, and after a (re)list the history holds only
// what came since.
func (s *State) AtHistoryStartLocked(key string) *objects.Object {
	h := s.history
	for i := range h.count {
		if e := h.at(i); e.Cur.Key == key {
			return e.Prev
		}
	}
	if item, ok, _ := s.store.GetByKey(key); ok {
		return item.(*objects.Object)
	}
	return nil
}

// ResumableFromLocked is the RV a watch's 410 names as the oldest it could
// have resumed from, as upstream's cache names it (the conformance suite
// pins the message): the list's RV while nothing has been evicted since,
// else the RV just before the oldest event the history holds, or the
// cache's RV when it holds none. The history may reach further back (to the
// last evicted event, there being no event in between), so a watch from
// the RV named always resumes.
func (s *State) ResumableFromLocked() uint64 {
	h := s.history
	switch {
	case h.fromList:
		return h.startRV
	case h.len() > 0:
		return h.oldest().RV - 1
	default:
		return s.RVLocked()
	}
}
