package main

import (
	"testing"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
)

// The checker must see what the soak exists to find: a test of it on a
// made-up history, each case with one fault.
func TestCheck(t *testing.T) {
	keys := newKeyTable()
	a, b := keys.id("ns1/a"), keys.id("ns1/b")
	ver := func(rv uint64, shard string) *attrs {
		return &attrs{ns: "ns1", rv: rv, labels: labels.Set{"shard": shard}, fields: fields.Set{}}
	}
	// What a watch of shard=s1 sees: a ADDED@10, MODIFIED@12, DELETED@13
	// (moved out); b ADDED@14 (moved in), DELETED@15.
	a10, a12, a13 := ver(10, "s1"), ver(12, "s1"), ver(13, "s2")
	b11, b14 := ver(11, "s2"), ver(14, "s1")
	truth := []truthEvent{
		{rev: 10, key: a, typ: watch.Added, cur: a10},
		{rev: 11, key: b, typ: watch.Added, cur: b11},
		{rev: 12, key: a, typ: watch.Modified, cur: a12, prev: a10},
		{rev: 13, key: a, typ: watch.Modified, cur: a13, prev: a12},
		{rev: 14, key: b, typ: watch.Modified, cur: b14, prev: b11},
		{rev: 15, key: b, typ: watch.Deleted, prev: b14},
	}
	sp, err := newSpec("", "shard=s1", "")
	if err != nil {
		t.Fatal(err)
	}
	all := []recEvent{{10, a, evAdded}, {12, a, evModified}, {13, a, evDeleted}, {14, b, evAdded}, {15, b, evDeleted}}
	stream := func(from, ack uint64, evs ...recEvent) *segment {
		return &segment{rv: from, ack: ack, events: evs, ended: true}
	}
	state := func(rv uint64, items ...item) *segment { return &segment{state: true, rv: rv, items: items} }
	bk := func(rv uint64) recEvent { return recEvent{rv: rv, typ: evBookmark} }
	wlState := func(rv uint64, preEnd []recEvent, items ...item) *segment {
		return &segment{state: true, watchList: true, rv: rv, items: items, preEnd: preEnd}
	}
	type v = map[guarantee]int64
	type want struct {
		lost, duplicated, unexpected int64
		violations                   v
	}
	for _, tc := range []struct {
		name string
		segs []*segment
		want want
	}{
		{"every event once", []*segment{stream(9, 15, all...)}, want{}},
		{"one missing", []*segment{stream(9, 15, all[0], all[2], all[3], all[4])}, want{lost: 1, violations: v{gReliable: 1}}},
		{"one twice", []*segment{stream(9, 15, all[0], all[1], all[1], all[2], all[3], all[4])}, want{duplicated: 1, violations: v{gUnique: 1}}},
		{"one from before the start", []*segment{stream(10, 15, all...)}, want{duplicated: 1, violations: v{gUnique: 1}}},
		{"moved out sent as MODIFIED", []*segment{stream(9, 15, all[0], all[1], recEvent{13, a, evModified}, all[3], all[4])}, want{unexpected: 1, violations: v{gUnexpected: 1}}},
		{"an event the selector excludes", []*segment{stream(9, 15, all[0], recEvent{11, b, evAdded}, all[1], all[2], all[3], all[4])}, want{unexpected: 1, violations: v{gUnexpected: 1}}},
		{"out of order", []*segment{stream(9, 15, all[0], all[2], all[1], all[3], all[4])}, want{lost: 1, unexpected: 1, violations: v{gReliable: 1, gOrdered: 1}}},
		{"owed only up to the last acknowledgement", []*segment{stream(11, 13, all[1], all[2])}, want{}},
		{"a bookmark promises what is below it", []*segment{stream(13, 15, bk(15))}, want{lost: 2, violations: v{gReliable: 2}}},
		{"open at the end owes up to the final revision", []*segment{{rv: 13, ack: 14, events: all[3:4], ended: true, openAtEnd: true}}, want{lost: 1, violations: v{gReliable: 1}}},
		{"bookmarks between events", []*segment{stream(9, 15, bk(9), all[0], bk(11), all[1], all[2], bk(13), all[3], all[4], bk(16))}, want{}},
		{"a bookmark at a later event's RV", []*segment{stream(9, 15, all[0], bk(12), all[1], all[2], all[3], all[4])}, want{violations: v{gBookmarkable: 1}}},
		{"a bookmark below an earlier event", []*segment{stream(9, 15, all[0], all[1], bk(11), all[2], all[3], all[4])}, want{violations: v{gBookmarkable: 1}}},
		{"state right", []*segment{state(12, item{a, 12}), stream(12, 15, all[2:]...)}, want{}},
		{"state stale", []*segment{state(12, item{a, 10})}, want{lost: 1, violations: v{gState: 1}}},
		{"state missing one", []*segment{state(12)}, want{lost: 1, violations: v{gState: 1}}},
		{"state with one it should not have", []*segment{state(12, item{a, 12}, item{b, 11})}, want{unexpected: 1, violations: v{gState: 1}}},
		{"state holding one twice", []*segment{state(12, item{a, 12}, item{a, 12})}, want{duplicated: 1, violations: v{gState: 1}}},
		{"a relist resets what is owed", []*segment{stream(9, 10, all[0]), state(14, item{b, 14}), stream(14, 15, all[4])}, want{}},
		{"a resume where the previous stream left off", []*segment{stream(9, 12, all[0], all[1]), stream(12, 15, all[2:]...)}, want{}},
		{"a resume past where the previous stream left off", []*segment{stream(9, 12, all[0], all[1]), stream(13, 15, all[3], all[4])}, want{lost: 1, violations: v{gResumable: 1}}},
		{"a resume past a gap the spec does not see", []*segment{stream(9, 10, all[0]), stream(11, 15, all[1:]...)}, want{}},
		{"a stream past where the state left off", []*segment{state(12, item{a, 12}), stream(13, 15, all[3], all[4])}, want{lost: 1, violations: v{gResumable: 1}}},
		{"a resume that repeats its start", []*segment{stream(9, 12, all[0], all[1]), stream(12, 15, all[1:]...)}, want{duplicated: 1, violations: v{gResumable: 1}}},
		{"a rewound resume from an earlier event", []*segment{stream(9, 13, all[:3]...), stream(10, 15, all[1:]...)}, want{}},
		{"a rewound resume from an earlier bookmark that skips", []*segment{stream(9, 13, all[0], bk(11), all[1], all[2]), stream(11, 15, all[2:]...)}, want{lost: 1, violations: v{gReliable: 1}}},
		{"a WatchList by the contract", []*segment{wlState(12, nil, item{a, 12}), stream(12, 15, all[2:]...)}, want{}},
		{"a WatchList that sent a MODIFIED before its end", []*segment{wlState(12, []recEvent{all[1]}, item{a, 12}), stream(12, 15, all[2:]...)}, want{unexpected: 1, violations: v{gWatchList: 1}}},
		{"a WatchList's initial event above its end bookmark", []*segment{wlState(11, nil, item{a, 12})}, want{lost: 1, unexpected: 1, violations: v{gWatchList: 2}}},
		{"a WatchList then an event at its RV", []*segment{wlState(12, nil, item{a, 12}), stream(12, 15, all[1:]...)}, want{duplicated: 1, violations: v{gWatchList: 1}}},
		{"a WatchList that ended early still has its contract checked", []*segment{{state: true, watchList: true, incomplete: true, preEnd: []recEvent{all[1]}}}, want{unexpected: 1, violations: v{gWatchList: 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &watcherRec{kind: "watch", spec: sp, segs: tc.segs}
			res := check(truth, []*watcherRec{rec}, 15, keys)
			got := [3]int64{res.lost, res.duplicated, res.unexpected}
			if w := [3]int64{tc.want.lost, tc.want.duplicated, tc.want.unexpected}; got != w {
				t.Errorf("lost, duplicated, unexpected = %v, want %v; %v", got, w, res.examples)
			}
			var wantV [numGuarantees]int64
			for g, n := range tc.want.violations {
				wantV[g] = n
			}
			if res.violations != wantV {
				t.Errorf("violations %s, want %v; %v", res.violationsString(), tc.want.violations, res.examples)
			}
		})
	}
}

// A violation names the watcher and the RVs, and shows etcd's history
// around the RV at fault.
func TestViolationShowsHistoryAround(t *testing.T) {
	keys := newKeyTable()
	a := keys.id("ns1/a")
	v := func(rv uint64) *attrs { return &attrs{ns: "ns1", rv: rv, labels: labels.Set{}, fields: fields.Set{}} }
	truth := []truthEvent{
		{rev: 5, key: a, typ: watch.Added, cur: v(5)},
		{rev: 6, key: a, typ: watch.Modified, cur: v(6), prev: v(5)},
		{rev: 7, key: a, typ: watch.Modified, cur: v(7), prev: v(6)},
	}
	sp, err := newSpec("ns1", "", "")
	if err != nil {
		t.Fatal(err)
	}
	rec := &watcherRec{kind: "watch", spec: sp, segs: []*segment{{rv: 4, ack: 7, ended: true, events: []recEvent{{5, a, evAdded}, {7, a, evModified}}}}}
	res := check(truth, []*watcherRec{rec}, 7, keys)
	if len(res.examples) != 1 {
		t.Fatalf("examples %v, want one", res.examples)
	}
	want := "[reliable] watcher 0 (watch ns1 {} {}) stream from 4 to 7: lost MODIFIED ns1/a@6; etcd around it: 5 created ns1/a, *6 updated ns1/a, 7 updated ns1/a"
	if res.examples[0] != want {
		t.Errorf("example\n%s\nwant\n%s", res.examples[0], want)
	}
}
