package state

import (
	"iter"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
)

// CheckpointEvery is how many applied RVs apart the snapshots keep a clone
// of the ordered objects. A list at an RV between two clones is served
// from the later one with the changes after that RV undone (at most this
// many, from the history), so the bound trades memory the collector scans
// against work per past list.
const CheckpointEvery = 32

// snapshots are the cache's past states, one per RV it applied an event
// at, as upstream's cache keeps since ListFromCacheSnapshot: they serve
// lists at an exact RV and the later pages of a paginated list (whose
// continue token carries the RV of its first page) from memory.
// State.mu guards them.
//
// Upstream keeps a copy-on-write clone of its store per event. Each clone
// is O(1) to take, but the next write copies the B-tree nodes on its path
// (about 2-3 KB at 10,000 objects), and as long as the clone is kept so
// are they: 10,000 writes in the window kept some 17 MB of pointer-dense
// nodes that every GC cycle scans, which slowed every list (RV "0"
// included) by the collector's share. Here a clone is kept only every
// checkpointEvery RVs; the state at any RV in between is the next
// checkpoint with the history's events after that RV undone, and above the
// last checkpoint, the current state (State.currentTreeLocked, a clone
// taken only when something reads it) with them undone: the same states,
// at 1/checkpointEvery of the memory, and a write copies a path of nodes
// only after a checkpoint or a read, not after every write.
//
// A state is kept while the history covers its RV and it is younger than
// the window; the newest is always kept.
type snapshots struct {
	window time.Duration
	// In RV order, every RV whose state is kept; at[i] is when rvs[i] was
	// applied, in Unix nanoseconds. Neither holds pointers: the collector
	// does not scan them.
	rvs []uint64
	at  []int64
	// checkpoints are clones at some of rvs, in RV order, none below
	// rvs[0].
	checkpoints []checkpoint
	// sinceCheckpoint counts the RVs applied since the last checkpoint.
	sinceCheckpoint int
}

// checkpoint is a clone of the ordered objects at rv. It is never written.
type checkpoint struct {
	rv   uint64
	tree orderedObjects
}

// add records the state at rv, which clone copies (copy-on-write) when a
// checkpoint is due; rvs only grow.
func (s *snapshots) add(rv uint64, now time.Time, clone func() orderedObjects) {
	if n := len(s.rvs); n > 0 && s.rvs[n-1] >= rv {
		// The same RV again (one etcd transaction changing several keys):
		// the newer state.
		s.at[n-1] = now.UnixNano()
		if m := len(s.checkpoints); m > 0 && s.checkpoints[m-1].rv == s.rvs[n-1] {
			s.checkpoints[m-1].tree = clone()
		}
		return
	}
	s.rvs = append(s.rvs, rv)
	s.at = append(s.at, now.UnixNano())
	if s.sinceCheckpoint++; s.sinceCheckpoint >= CheckpointEvery {
		s.checkpoints = append(s.checkpoints, checkpoint{rv: rv, tree: clone()})
		s.sinceCheckpoint = 0
	}
	// Age out: what the window no longer covers (the newest stays).
	old, nowNanos := 0, now.UnixNano()
	for old < len(s.rvs)-1 && nowNanos-s.at[old] > int64(s.window) {
		old++
	}
	s.drop(old)
}

// forgetBelow drops the states of RVs below rv: the history no longer
// covers them, so the cache could not say what followed them either.
func (s *snapshots) forgetBelow(rv uint64) {
	s.drop(sort.Search(len(s.rvs), func(i int) bool { return s.rvs[i] >= rv }))
}

// forgetCompacted drops the states etcd's compaction at rev made older than
// anything it still serves. The newest state at or below rev is the state
// at rev itself, which etcd still reads, so it stays.
func (s *snapshots) forgetCompacted(rev uint64) {
	s.drop(max(0, sort.Search(len(s.rvs), func(i int) bool { return s.rvs[i] > rev })-1))
}

// drop forgets the n oldest states, and the checkpoints below what is
// left: a state is rebuilt from a checkpoint at or above its RV.
func (s *snapshots) drop(n int) {
	if n == 0 {
		return
	}
	s.rvs, s.at = s.rvs[n:], s.at[n:]
	keep := len(s.checkpoints)
	if len(s.rvs) > 0 {
		keep = sort.Search(len(s.checkpoints), func(i int) bool { return s.checkpoints[i].rv >= s.rvs[0] })
	}
	clear(s.checkpoints[:keep])
	s.checkpoints = s.checkpoints[keep:]
	if cap(s.rvs) > 64 && len(s.rvs) < cap(s.rvs)/4 {
		s.rvs, s.at = slices.Clone(s.rvs), slices.Clone(s.at)
	}
	if cap(s.checkpoints) > 64 && len(s.checkpoints) < cap(s.checkpoints)/4 {
		s.checkpoints = slices.Clone(s.checkpoints)
	}
}

// reset forgets every state, after a relist.
func (s *snapshots) reset() {
	s.rvs, s.at, s.checkpoints, s.sinceCheckpoint = nil, nil, nil, 0
}

// covers is whether the state at rv is kept: some RV at or below it is.
// The caller checks rv is not ahead of the cache.
func (s *snapshots) covers(rv uint64) bool {
	return len(s.rvs) > 0 && s.rvs[0] <= rv
}

// checkpointFor finds what the state at rv is rebuilt from: at, the newest
// RV applied at or below rv (nothing changed after it up to rv), and the
// first checkpoint at or above at, whose changes after at are to be
// undone. Above the last checkpoint, from is the newest RV's state with no
// tree: the current state, which the caller clones. False when rv is older
// than every state kept.
func (s *snapshots) checkpointFor(rv uint64) (at uint64, from checkpoint, ok bool) {
	i := sort.Search(len(s.rvs), func(i int) bool { return s.rvs[i] > rv })
	if i == 0 {
		return 0, checkpoint{}, false
	}
	at = s.rvs[i-1]
	j := sort.Search(len(s.checkpoints), func(j int) bool { return s.checkpoints[j].rv >= at })
	if j < len(s.checkpoints) {
		return at, s.checkpoints[j], true
	}
	return at, checkpoint{rv: s.rvs[len(s.rvs)-1]}, true
}

func (s *snapshots) len() int { return len(s.rvs) }

// pastState is the state at an RV: a checkpoint taken at or after it, with
// what changed after the RV undone.
type pastState struct {
	Tree orderedObjects
	// undo is, in key order, each key the checkpoint has differently: obj
	// is what the key held at the RV, nil where it did not exist.
	undo []keyState
}

type keyState struct {
	key string
	obj *objects.Object
}

// undoSince lists what the events after rv changed, as it was at rv: events
// holds them, oldest first. An event's prev is the object the cache held
// before it (nil: none), except that a DELETED of a key the cache did not
// hold has prev set to the deleted object itself (linkPrev).
func undoSince(events []*objects.Event) []keyState {
	if len(events) == 0 {
		return nil
	}
	out := make([]keyState, 0, len(events))
	index := make(map[string]int, len(events))
	// Newest first: what a key held at rv is what its oldest change after
	// rv found.
	for i := len(events) - 1; i >= 0; i-- {
		e := events[i]
		before := e.Prev
		if before == e.Cur {
			before = nil
		}
		if j, ok := index[e.Cur.Key]; ok {
			out[j].obj = before
			continue
		}
		index[e.Cur.Key] = len(out)
		out = append(out, keyState{key: e.Cur.Key, obj: before})
	}
	slices.SortFunc(out, func(a, b keyState) int { return strings.Compare(a.key, b.key) })
	return out
}

// Ascend yields the objects of the state whose key starts with prefix,
// from the key start on, in key order.
func (p pastState) Ascend(prefix, start string) iter.Seq[*objects.Object] {
	if len(p.undo) == 0 {
		return p.Tree.ascend(prefix, start)
	}
	return func(yield func(*objects.Object) bool) {
		undo := p.undo[sort.Search(len(p.undo), func(i int) bool { return p.undo[i].key >= start }):]
		// next yields the undone keys below key (all of them when last),
		// where the key existed at the RV; false once yield says stop.
		next := func(key string, last bool) bool {
			for len(undo) > 0 && (last || undo[0].key < key) {
				u := undo[0]
				undo = undo[1:]
				if u.obj != nil && strings.HasPrefix(u.key, prefix) && !yield(u.obj) {
					return false
				}
			}
			return true
		}
		stopped := false
		p.Tree.tree.AscendGreaterOrEqual(&objects.Object{Key: start}, func(o *objects.Object) bool {
			if !strings.HasPrefix(o.Key, prefix) {
				return false
			}
			if len(undo) > 0 && undo[0].key <= o.Key {
				if !next(o.Key, false) {
					stopped = true
					return false
				}
				if len(undo) > 0 && undo[0].key == o.Key {
					// The key changed after the RV: what it held then.
					u := undo[0]
					undo = undo[1:]
					if u.obj == nil {
						return true
					}
					o = u.obj
				}
			}
			if !yield(o) {
				stopped = true
				return false
			}
			return true
		})
		if !stopped {
			next("", true)
		}
	}
}
