package main

import (
	"fmt"
	"maps"
	"sort"

	"k8s.io/apimachinery/pkg/watch"
)

// The checker compares every watcher's record with the truth (etcd's
// history of widgets, recorded live by truth.go). What it counts:
//
// A stream that resumed from RV b and acknowledged up to f (its last event
// or bookmark; a stream still open when the watchers were stopped owes
// everything up to the final revision, so f is at least that) must deliver,
// exactly once and in order, every truth event e with b < e.rev <= f that
// its spec sees: e's object in the watch's namespace and passing its
// selectors after the change (ADDED if it did not before, MODIFIED if it
// did) or before it (DELETED: a deletion, or an update that moved the object
// out of the selectors), at e's revision, as the server's cache defines
// watch events (cacher/convert.go forWatcher, upstream's rule).
//
// A stream owes nothing at or below the RV it resumed from, so it must
// resume where the watcher's previous stream (at its f) or state (at its L)
// left off, or below: every event the spec sees between where the previous
// left off and where the stream resumed is lost. The first stream of a
// watcher owes nothing before its start.
//
// A state (a LIST, or a WatchList's initial events up to the bookmark that
// ends them) at RV L must hold exactly the objects the truth has at L in the
// spec, each at its resourceVersion. A watcher that lists again resets its
// expectation there: what happened between its last stream's f and L is in
// the state, not owed as events.
//
//   - lost: an event a stream owed and did not deliver, or that fell between
//     two of a watcher's streams (or a state and a stream); an object a
//     state lacks, or has at another resourceVersion.
//   - duplicated: an event a stream delivered a second time, or at or below
//     the RV it resumed from; an object a state holds twice.
//   - unexpected: an event the truth does not have for that spec (at that
//     revision, another object or another type), or one delivered out of
//     order; an object a state holds that the truth does not have at L.
//
// Events are matched by revision: etcd gives every write its own, and a
// widget's resourceVersion is the revision of its last write (of its
// deletion, for a DELETED).
type result struct {
	written, delivered           int64
	lost, duplicated, unexpected int64
	states, streams              int64
	examples                     []string
}

const maxExamples = 20

func (r *result) note(format string, args ...any) {
	if len(r.examples) < maxExamples {
		r.examples = append(r.examples, fmt.Sprintf(format, args...))
	}
}

type expEvent struct {
	rev uint64
	key int32
	typ uint8
}

// expected is the truth as a watch with spec sp sees it.
func expected(events []truthEvent, sp *spec) []expEvent {
	var out []expEvent
	for _, e := range events {
		curOK := e.typ != watch.Deleted && sp.matches(e.cur)
		prevOK := sp.matches(e.prev)
		var typ uint8
		switch {
		case e.typ == watch.Deleted && prevOK:
			typ = evDeleted
		case curOK && prevOK:
			typ = evModified
		case curOK:
			typ = evAdded
		case prevOK:
			typ = evDeleted
		default:
			continue
		}
		out = append(out, expEvent{rev: e.rev, key: e.key, typ: typ})
	}
	return out
}

var typeNames = map[uint8]string{evAdded: "ADDED", evModified: "MODIFIED", evDeleted: "DELETED"}

func check(events []truthEvent, recs []*watcherRec, final uint64, keys *keyTable) *result {
	res := &result{written: int64(len(events))}
	exp := map[*spec][]expEvent{}
	type stateCheck struct {
		w   int
		rec *watcherRec
		seg *segment
	}
	var states []stateCheck
	for wi, rec := range recs {
		want, ok := exp[rec.spec]
		if !ok {
			want = expected(events, rec.spec)
			exp[rec.spec] = want
		}
		// leftOff is where the watcher's last state or stream left it: a
		// stream owes nothing below its own start, so the next must start at
		// or below leftOff, or what lies between is lost.
		var leftOff uint64
		for si, seg := range rec.segs {
			if seg.state {
				res.states++
				states = append(states, stateCheck{w: wi, rec: rec, seg: seg})
				leftOff = seg.rv
				continue
			}
			res.streams++
			res.delivered += int64(len(seg.events))
			if si > 0 && seg.rv > leftOff {
				checkGap(res, wi, rec, leftOff, seg.rv, want, keys)
			}
			leftOff = checkStream(res, wi, rec, seg, want, final, keys)
		}
	}

	// States, in RV order, against the truth replayed up to each.
	sort.SliceStable(states, func(i, j int) bool { return states[i].seg.rv < states[j].seg.rv })
	state := map[int32]*attrs{}
	next := 0
	for _, sc := range states {
		for next < len(events) && events[next].rev <= sc.seg.rv {
			e := events[next]
			if e.typ == watch.Deleted {
				delete(state, e.key)
			} else {
				state[e.key] = e.cur
			}
			next++
		}
		have := make(map[int32]uint64, len(sc.seg.items))
		for _, it := range sc.seg.items {
			if _, dup := have[it.key]; dup {
				res.duplicated++
				res.note("watcher %d (%s %v) state at %d holds %s twice", sc.w, sc.rec.kind, sc.rec.spec, sc.seg.rv, keys.name(it.key))
			}
			have[it.key] = it.rv
		}
		for key, a := range state {
			if !sc.rec.spec.matches(a) {
				continue
			}
			rv, ok := have[key]
			switch {
			case !ok:
				res.lost++
				res.note("watcher %d (%s %v) state at %d lacks %s@%d", sc.w, sc.rec.kind, sc.rec.spec, sc.seg.rv, keys.name(key), a.rv)
			case rv != a.rv:
				res.lost++
				res.note("watcher %d (%s %v) state at %d has %s@%d, truth @%d", sc.w, sc.rec.kind, sc.rec.spec, sc.seg.rv, keys.name(key), rv, a.rv)
			}
			delete(have, key)
		}
		for key, rv := range have {
			res.unexpected++
			res.note("watcher %d (%s %v) state at %d has %s@%d, which the truth has not there", sc.w, sc.rec.kind, sc.rec.spec, sc.seg.rv, keys.name(key), rv)
		}
	}
	return res
}

// checkGap counts as lost every event the watcher's spec sees in (from, to]:
// its previous state or stream left off at from, and its next stream
// resumed from to, so no stream owed them and none delivered them.
func checkGap(res *result, wi int, rec *watcherRec, from, to uint64, exp []expEvent, keys *keyTable) {
	for _, e := range between(exp, from, to) {
		res.lost++
		res.note("watcher %d (%s %v) stream from %d after the previous left off at %d: lost %s %s@%d", wi, rec.kind, rec.spec, to, from, typeNames[e.typ], keys.name(e.key), e.rev)
	}
}

// between is the events of exp (sorted by revision) in (from, to].
func between(exp []expEvent, from, to uint64) []expEvent {
	lo := sort.Search(len(exp), func(i int) bool { return exp[i].rev > from })
	hi := sort.Search(len(exp), func(i int) bool { return exp[i].rev > to })
	return exp[lo:max(lo, hi)]
}

// checkStream checks one stream and returns the RV it left off at: every
// event up to it was owed.
func checkStream(res *result, wi int, rec *watcherRec, seg *segment, exp []expEvent, final uint64, keys *keyTable) uint64 {
	end := seg.ack
	if seg.openAtEnd {
		end = max(end, final)
	}
	want := between(exp, seg.rv, end)
	seen := make(map[uint64]bool, len(seg.events))
	last, i := seg.rv, 0
	for _, g := range seg.events {
		if g.rv <= seg.rv || seen[g.rv] {
			res.duplicated++
			res.note("watcher %d (%s %v) stream from %d: %s %s@%d again", wi, rec.kind, rec.spec, seg.rv, typeNames[g.typ], keys.name(g.key), g.rv)
			continue
		}
		seen[g.rv] = true
		if g.rv < last {
			res.unexpected++
			res.note("watcher %d (%s %v) stream from %d: %s %s@%d after @%d", wi, rec.kind, rec.spec, seg.rv, typeNames[g.typ], keys.name(g.key), g.rv, last)
			continue
		}
		last = g.rv
		for i < len(want) && want[i].rev < g.rv {
			res.lost++
			res.note("watcher %d (%s %v) stream from %d to %d: lost %s %s@%d", wi, rec.kind, rec.spec, seg.rv, end, typeNames[want[i].typ], keys.name(want[i].key), want[i].rev)
			i++
		}
		if i < len(want) && want[i].rev == g.rv {
			if want[i].key != g.key || want[i].typ != g.typ {
				res.unexpected++
				res.note("watcher %d (%s %v) stream from %d: got %s %s@%d, truth %s %s", wi, rec.kind, rec.spec, seg.rv,
					typeNames[g.typ], keys.name(g.key), g.rv, typeNames[want[i].typ], keys.name(want[i].key))
			}
			i++
			continue
		}
		res.unexpected++
		res.note("watcher %d (%s %v) stream from %d: got %s %s@%d, which the truth has not for it", wi, rec.kind, rec.spec, seg.rv, typeNames[g.typ], keys.name(g.key), g.rv)
	}
	for ; i < len(want); i++ {
		res.lost++
		res.note("watcher %d (%s %v) stream from %d to %d: lost %s %s@%d", wi, rec.kind, rec.spec, seg.rv, end, typeNames[want[i].typ], keys.name(want[i].key), want[i].rev)
	}
	return max(end, seg.rv)
}

// finalState is the truth's widgets at the end.
func finalState(events []truthEvent) map[int32]*attrs {
	state := map[int32]*attrs{}
	for _, e := range events {
		if e.typ == watch.Deleted {
			delete(state, e.key)
		} else {
			state[e.key] = e.cur
		}
	}
	return state
}

// storeMismatches compares an informer's store (key -> RV) with the truth's
// final state in its spec.
func storeMismatches(store map[int32]uint64, final map[int32]*attrs, sp *spec) int {
	n := 0
	store = maps.Clone(store)
	for key, a := range final {
		if !sp.matches(a) {
			continue
		}
		if rv, ok := store[key]; !ok || rv != a.rv {
			n++
		}
		delete(store, key)
	}
	return n + len(store)
}
