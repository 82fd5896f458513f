package main

import (
	"fmt"
	"maps"
	"sort"
	"strings"

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
//
// Every fault found is also filed under the guarantee it breaks, etcd's
// watch guarantees (tests/robustness in etcd-io/etcd) as a watch cache owes
// them to its clients, plus the states':
//
//   - ordered: a stream's events come in strictly rising RVs.
//   - unique: no event comes twice in a stream, nor at or below the RV the
//     stream started from.
//   - reliable: a stream delivers every event the truth has for its spec
//     between where it started and the last RV it acknowledged.
//   - resumable: a watch resumed from a delivered event's or bookmark's RV
//     (the last, or an earlier one: watchers rewind on purpose now and then)
//     continues with no gap (it starts at or below where the previous left
//     off) and no repeat (nothing at or below its start).
//   - bookmarkable: a bookmark's RV is at least every earlier event's of its
//     stream and below every later one's.
//   - watchlist: a WatchList's initial events are ADDED only, then the end
//     bookmark at an RV at or above every initial event's, then only events
//     above it; its state is the truth at that RV.
//   - state: a LIST's items are the truth at its RV.
//   - unexpected: an event the truth does not have for the spec.
type result struct {
	written, delivered           int64
	lost, duplicated, unexpected int64
	states, streams              int64
	// rewinds are streams that resumed below where the previous one left
	// off (from an earlier delivered RV).
	rewinds    int64
	violations [numGuarantees]int64
	examples   []string

	events []truthEvent // the truth, for the history around an example
	keys   *keyTable
}

type guarantee int

const (
	gOrdered guarantee = iota
	gUnique
	gReliable
	gResumable
	gBookmarkable
	gWatchList
	gState
	gUnexpected
	numGuarantees
)

var guaranteeNames = [numGuarantees]string{"ordered", "unique", "reliable", "resumable", "bookmarkable", "watchlist", "state", "unexpected"}

// totalViolations is every guarantee's violations together.
func (r *result) totalViolations() int64 {
	var n int64
	for _, v := range r.violations {
		n += v
	}
	return n
}

// violationsString is "ordered=0 unique=0 ...".
func (r *result) violationsString() string {
	var b strings.Builder
	for g, v := range r.violations {
		if g > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s=%d", guaranteeNames[g], v)
	}
	return b.String()
}

// violate files one fault under g, with an example that shows etcd's
// history around rev.
func (r *result) violate(g guarantee, rev uint64, format string, args ...any) {
	r.violations[g]++
	if len(r.examples) < maxExamples {
		r.examples = append(r.examples, fmt.Sprintf("[%s] ", guaranteeNames[g])+fmt.Sprintf(format, args...)+"; etcd around it: "+r.around(rev))
	}
}

// around is the truth's events nearest rev: three before, the one at or
// after it and two more.
func (r *result) around(rev uint64) string {
	if r.keys == nil {
		return "-"
	}
	i := sort.Search(len(r.events), func(i int) bool { return r.events[i].rev >= rev })
	var parts []string
	for j := max(0, i-3); j < min(len(r.events), i+3); j++ {
		e := r.events[j]
		mark := ""
		if e.rev == rev {
			mark = "*"
		}
		parts = append(parts, fmt.Sprintf("%s%d %s %s", mark, e.rev, truthTypeNames[e.typ], r.keys.name(e.key)))
	}
	if len(parts) == 0 {
		return "(none)"
	}
	return strings.Join(parts, ", ")
}

var truthTypeNames = map[watch.EventType]string{watch.Added: "created", watch.Modified: "updated", watch.Deleted: "deleted"}

const maxExamples = 20

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

var typeNames = map[uint8]string{evAdded: "ADDED", evModified: "MODIFIED", evDeleted: "DELETED", evBookmark: "BOOKMARK"}

func check(events []truthEvent, recs []*watcherRec, final uint64, keys *keyTable) *result {
	res := &result{written: int64(len(events)), events: events, keys: keys}
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
		var prev *segment
		for si, seg := range rec.segs {
			if seg.state {
				res.states++
				if seg.watchList {
					checkWatchListStart(res, wi, rec, seg)
				}
				if !seg.incomplete {
					states = append(states, stateCheck{w: wi, rec: rec, seg: seg})
					leftOff = seg.rv
					prev = seg
				}
				continue
			}
			res.streams++
			if si > 0 && seg.rv > leftOff {
				checkGap(res, wi, rec, leftOff, seg.rv, want, keys)
			}
			if prev != nil && !prev.state && seg.rv < leftOff {
				res.rewinds++
			}
			leftOff = checkStream(res, wi, rec, seg, prev, want, final, keys)
			prev = seg
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
		g, what := gState, "state"
		if sc.seg.watchList {
			g, what = gWatchList, "WatchList state"
		}
		have := make(map[int32]uint64, len(sc.seg.items))
		for _, it := range sc.seg.items {
			if _, dup := have[it.key]; dup {
				res.duplicated++
				res.violate(g, sc.seg.rv, "watcher %d (%s %v) %s at %d holds %s twice", sc.w, sc.rec.kind, sc.rec.spec, what, sc.seg.rv, keys.name(it.key))
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
				res.violate(g, sc.seg.rv, "watcher %d (%s %v) %s at %d lacks %s@%d", sc.w, sc.rec.kind, sc.rec.spec, what, sc.seg.rv, keys.name(key), a.rv)
			case rv != a.rv:
				res.lost++
				res.violate(g, sc.seg.rv, "watcher %d (%s %v) %s at %d has %s@%d, truth @%d", sc.w, sc.rec.kind, sc.rec.spec, what, sc.seg.rv, keys.name(key), rv, a.rv)
			}
			delete(have, key)
		}
		for key, rv := range have {
			res.unexpected++
			res.violate(g, sc.seg.rv, "watcher %d (%s %v) %s at %d has %s@%d, which the truth has not there", sc.w, sc.rec.kind, sc.rec.spec, what, sc.seg.rv, keys.name(key), rv)
		}
	}
	return res
}

// checkWatchListStart checks what a WatchList sent before its end
// bookmark: ADDED events only, none above the bookmark's RV.
func checkWatchListStart(res *result, wi int, rec *watcherRec, seg *segment) {
	for _, e := range seg.preEnd {
		res.unexpected++
		res.violate(gWatchList, e.rv, "watcher %d (%s %v) WatchList sent %s %s@%d before its initial-events-end bookmark", wi, rec.kind, rec.spec, typeNames[e.typ], res.keys.name(e.key), e.rv)
	}
	if seg.incomplete {
		return
	}
	for _, it := range seg.items {
		if it.rv > seg.rv {
			res.unexpected++
			res.violate(gWatchList, it.rv, "watcher %d (%s %v) WatchList initial event %s@%d above its end bookmark's RV %d", wi, rec.kind, rec.spec, res.keys.name(it.key), it.rv, seg.rv)
		}
	}
}

// checkGap counts as lost every event the watcher's spec sees in (from, to]:
// its previous state or stream left off at from, and its next stream
// resumed from to, so no stream owed them and none delivered them.
func checkGap(res *result, wi int, rec *watcherRec, from, to uint64, exp []expEvent, keys *keyTable) {
	for _, e := range between(exp, from, to) {
		res.lost++
		res.violate(gResumable, e.rev, "watcher %d (%s %v) stream from %d after the previous left off at %d: lost %s %s@%d", wi, rec.kind, rec.spec, to, from, typeNames[e.typ], keys.name(e.key), e.rev)
	}
}

// between is the events of exp (sorted by revision) in (from, to].
func between(exp []expEvent, from, to uint64) []expEvent {
	lo := sort.Search(len(exp), func(i int) bool { return exp[i].rev > from })
	hi := sort.Search(len(exp), func(i int) bool { return exp[i].rev > to })
	return exp[lo:max(lo, hi)]
}

// checkStream checks one stream and returns the RV it left off at: every
// event up to it was owed. prev is the watcher's segment before it (nil
// for its first): after a WatchList's state, an event at or below the
// stream's start breaks the WatchList contract; after a stream, the
// resume's.
func checkStream(res *result, wi int, rec *watcherRec, seg, prev *segment, exp []expEvent, final uint64, keys *keyTable) uint64 {
	end := seg.ack
	if seg.openAtEnd {
		end = max(end, final)
	}
	want := between(exp, seg.rv, end)
	seen := make(map[uint64]bool, len(seg.events))
	repeat := gUnique
	switch {
	case prev != nil && prev.state && prev.watchList:
		repeat = gWatchList
	case prev != nil && !prev.state:
		repeat = gResumable
	}
	last, i := seg.rv, 0
	var lastEvent, lastBookmark uint64
	for _, g := range seg.events {
		if g.typ == evBookmark {
			if g.rv < lastEvent {
				res.violate(gBookmarkable, g.rv, "watcher %d (%s %v) stream from %d: bookmark @%d after an event @%d", wi, rec.kind, rec.spec, seg.rv, g.rv, lastEvent)
			}
			lastBookmark = max(lastBookmark, g.rv)
			continue
		}
		res.delivered++
		if g.rv <= lastBookmark {
			res.violate(gBookmarkable, g.rv, "watcher %d (%s %v) stream from %d: %s %s@%d after a bookmark @%d", wi, rec.kind, rec.spec, seg.rv, typeNames[g.typ], keys.name(g.key), g.rv, lastBookmark)
		}
		lastEvent = max(lastEvent, g.rv)
		if g.rv <= seg.rv {
			res.duplicated++
			res.violate(repeat, g.rv, "watcher %d (%s %v) stream from %d: %s %s@%d, at or below where it started", wi, rec.kind, rec.spec, seg.rv, typeNames[g.typ], keys.name(g.key), g.rv)
			continue
		}
		if seen[g.rv] {
			res.duplicated++
			res.violate(gUnique, g.rv, "watcher %d (%s %v) stream from %d: %s %s@%d again", wi, rec.kind, rec.spec, seg.rv, typeNames[g.typ], keys.name(g.key), g.rv)
			continue
		}
		seen[g.rv] = true
		if g.rv < last {
			res.unexpected++
			res.violate(gOrdered, g.rv, "watcher %d (%s %v) stream from %d: %s %s@%d after @%d", wi, rec.kind, rec.spec, seg.rv, typeNames[g.typ], keys.name(g.key), g.rv, last)
			continue
		}
		last = g.rv
		for i < len(want) && want[i].rev < g.rv {
			res.lost++
			res.violate(gReliable, want[i].rev, "watcher %d (%s %v) stream from %d to %d: lost %s %s@%d", wi, rec.kind, rec.spec, seg.rv, end, typeNames[want[i].typ], keys.name(want[i].key), want[i].rev)
			i++
		}
		if i < len(want) && want[i].rev == g.rv {
			if want[i].key != g.key || want[i].typ != g.typ {
				res.unexpected++
				res.violate(gUnexpected, g.rv, "watcher %d (%s %v) stream from %d: got %s %s@%d, truth %s %s", wi, rec.kind, rec.spec, seg.rv,
					typeNames[g.typ], keys.name(g.key), g.rv, typeNames[want[i].typ], keys.name(want[i].key))
			}
			i++
			continue
		}
		res.unexpected++
		res.violate(gUnexpected, g.rv, "watcher %d (%s %v) stream from %d: got %s %s@%d, which the truth has not for it", wi, rec.kind, rec.spec, seg.rv, typeNames[g.typ], keys.name(g.key), g.rv)
	}
	for ; i < len(want); i++ {
		res.lost++
		res.violate(gReliable, want[i].rev, "watcher %d (%s %v) stream from %d to %d: lost %s %s@%d", wi, rec.kind, rec.spec, seg.rv, end, typeNames[want[i].typ], keys.name(want[i].key), want[i].rev)
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
