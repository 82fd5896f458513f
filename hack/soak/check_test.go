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
	type want struct{ lost, duplicated, unexpected int64 }
	for _, tc := range []struct {
		name string
		segs []*segment
		want want
	}{
		{"every event once", []*segment{stream(9, 15, all...)}, want{}},
		{"one missing", []*segment{stream(9, 15, all[0], all[2], all[3], all[4])}, want{lost: 1}},
		{"one twice", []*segment{stream(9, 15, all[0], all[1], all[1], all[2], all[3], all[4])}, want{duplicated: 1}},
		{"one from before the start", []*segment{stream(10, 15, all...)}, want{duplicated: 1}},
		{"moved out sent as MODIFIED", []*segment{stream(9, 15, all[0], all[1], recEvent{13, a, evModified}, all[3], all[4])}, want{unexpected: 1}},
		{"an event the selector excludes", []*segment{stream(9, 15, all[0], recEvent{11, b, evAdded}, all[1], all[2], all[3], all[4])}, want{unexpected: 1}},
		{"out of order", []*segment{stream(9, 15, all[0], all[2], all[1], all[3], all[4])}, want{lost: 1, unexpected: 1}},
		{"owed only up to the last acknowledgement", []*segment{stream(11, 13, all[1], all[2])}, want{}},
		{"a bookmark promises what is below it", []*segment{stream(13, 15)}, want{lost: 2}},
		{"open at the end owes up to the final revision", []*segment{{rv: 13, ack: 14, events: all[3:4], ended: true, openAtEnd: true}}, want{lost: 1}},
		{"state right", []*segment{state(12, item{a, 12}), stream(12, 15, all[2:]...)}, want{}},
		{"state stale", []*segment{state(12, item{a, 10})}, want{lost: 1}},
		{"state missing one", []*segment{state(12)}, want{lost: 1}},
		{"state with one it should not have", []*segment{state(12, item{a, 12}, item{b, 11})}, want{unexpected: 1}},
		{"state holding one twice", []*segment{state(12, item{a, 12}, item{a, 12})}, want{duplicated: 1}},
		{"a relist resets what is owed", []*segment{stream(9, 10, all[0]), state(14, item{b, 14}), stream(14, 15, all[4])}, want{}},
		{"a resume where the previous stream left off", []*segment{stream(9, 12, all[0], all[1]), stream(12, 15, all[2:]...)}, want{}},
		{"a resume past where the previous stream left off", []*segment{stream(9, 12, all[0], all[1]), stream(13, 15, all[3], all[4])}, want{lost: 1}},
		{"a resume past a gap the spec does not see", []*segment{stream(9, 10, all[0]), stream(11, 15, all[1:]...)}, want{}},
		{"a stream past where the state left off", []*segment{state(12, item{a, 12}), stream(13, 15, all[3], all[4])}, want{lost: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &watcherRec{kind: "watch", spec: sp, segs: tc.segs}
			res := check(truth, []*watcherRec{rec}, 15, keys)
			got := want{res.lost, res.duplicated, res.unexpected}
			if got != tc.want {
				t.Errorf("lost, duplicated, unexpected = %+v, want %+v; %v", got, tc.want, res.examples)
			}
		})
	}
}
