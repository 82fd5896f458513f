package cacher

import (
	"context"
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
)

// TestCacheStateInvariants drives a cacheState alone, the way the reflector
// does (a list, then random additions, updates, deletions, some of keys it
// never held, transactions of several events at one RV, progress, a drop of
// the history's start), and checks after every step the invariants written
// at the type: store and ordered hold the same objects, the model's; rv is
// the newest applied and advanced was closed when it moved; the history
// holds the events of (startRV, rv] in order; the current list and the
// snapshot at every RV still covered are the model's state at that RV.
func TestCacheStateInvariants(t *testing.T) {
	const listRV = 100
	now := time.Unix(1_700_000_000, 0)
	s := newCacheState("/pods/", nil, time.Hour, 10_000, true, newResourceMetrics(schema.GroupResource{Resource: "pods"}), now)
	obj := func(name string, rv uint64) *object {
		pod := newTestPod(name, rv, map[string]string{"rv": fmt.Sprint(rv)}, "")
		return &object{key: "/pods/" + testNamespace + "/" + name, obj: pod}
	}

	model := map[string]*object{} // key -> the object held
	var list []any
	for i := range 10 {
		o := obj(fmt.Sprintf("pod-%02d", i), listRV)
		model[o.key] = o
		list = append(list, o)
	}
	s.mu.Lock()
	if err := s.resetLocked(list, listRV, now); err != nil {
		t.Fatal(err)
	}
	s.mu.Unlock()
	states := map[uint64]map[string]*object{listRV: maps.Clone(model)}
	var applied []*event // every event since the list, in order

	rng := rand.New(rand.NewSource(1))
	rv := uint64(listRV)
	for step := range 400 { // 400 % 10 == 0: the last step checks the past states
		before, advanced := s.progress()
		switch {
		case step == 200:
			// The history's oldest hundred go, as though for room.
			s.dropHistoryThrough(listRV + 100)
		case rng.Intn(10) == 0:
			// Progress: rv moves, nothing changes.
			rv++
			s.advance(rv)
			states[rv] = maps.Clone(model)
		default:
			// Now and then a transaction: several events at one RV.
			if step == 0 || rng.Intn(4) != 0 {
				rv++
			}
			cur := obj(fmt.Sprintf("pod-%02d", rng.Intn(20)), rv)
			e := &event{typ: watch.Modified, rv: rv, cur: cur, recordedNanos: now.UnixNano()}
			_, held := model[cur.key]
			switch {
			case held && rng.Intn(3) == 0, !held && rng.Intn(5) == 0:
				e.typ = watch.Deleted
				delete(model, cur.key)
			case !held:
				e.typ = watch.Added
				model[cur.key] = cur
			default:
				model[cur.key] = cur
			}
			// linkPrev, without a trigger.
			if e.prev = s.peek(cur.key); e.typ == watch.Deleted && e.prev == nil {
				e.prev = e.cur
			}
			if _, err := s.apply(e, now); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			applied = append(applied, e)
			states[rv] = maps.Clone(model)
		}
		now = now.Add(time.Second)

		gotRV, _ := s.progress()
		if gotRV != rv {
			t.Fatalf("step %d: rv %d, want %d", step, gotRV, rv)
		}
		if moved := rv != before; moved != closed(advanced) {
			t.Fatalf("step %d: rv %d to %d, advanced closed %v", step, before, rv, closed(advanced))
		}
		checkHeld(t, step, s, model)
		checkHistory(t, step, s, applied)
		// The current state, and the past states the snapshots cover.
		if got := listed(t, s, rv, false); !slices.Equal(got, sortedKeys(model)) {
			t.Fatalf("step %d: a list of the current state has %v, want %v", step, got, sortedKeys(model))
		}
		for at, state := range states {
			if (step%10 != 9 && step != 200) || !s.hasStateAt(at, 0) {
				continue
			}
			if got, want := listed(t, s, at, true), sortedKeys(state); !slices.Equal(got, want) {
				t.Fatalf("step %d: the snapshot at %d has %v, want %v", step, at, got, want)
			}
		}
	}
	if s.snapshots.len() == 0 || len(s.snapshots.checkpoints) == 0 {
		t.Fatalf("no snapshots or checkpoints were kept: the past states went unchecked")
	}
}

// checkHeld checks that store and ordered hold the same objects, model's.
func checkHeld(t *testing.T, step int, s *cacheState, model map[string]*object) {
	t.Helper()
	s.mu.RLock()
	defer s.mu.RUnlock()
	ordered := s.ordered.under("/pods/")
	if len(ordered) != len(model) || s.ordered.len() != len(model) || len(s.store.ListKeys()) != len(model) {
		t.Fatalf("step %d: ordered holds %d (len %d), store %d, want %d", step, len(ordered), s.ordered.len(), len(s.store.ListKeys()), len(model))
	}
	for _, o := range ordered {
		item, ok, _ := s.store.GetByKey(o.key)
		if !ok || item.(*object) != o || model[o.key] != o {
			t.Fatalf("step %d: %s: ordered and store or the model hold different objects", step, o.key)
		}
	}
}

// checkHistory checks that the history holds the applied events of
// (startRV, rv], in order, with what each changed from.
func checkHistory(t *testing.T, step int, s *cacheState, applied []*event) {
	t.Helper()
	s.mu.RLock()
	defer s.mu.RUnlock()
	start := s.historyStartLocked()
	got, ok := s.sinceLocked(start)
	if !ok {
		t.Fatalf("step %d: the history does not cover its own start %d", step, start)
	}
	var want []*event
	for _, e := range applied {
		if e.rv > start {
			want = append(want, e)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("step %d: the history from %d holds %d events, want %d", step, start, len(got), len(want))
	}
	if len(got) > 0 && got[len(got)-1].rv > s.rvLocked() {
		t.Fatalf("step %d: the history holds rv %d above the state's %d", step, got[len(got)-1].rv, s.rvLocked())
	}
	if _, ok := s.sinceLocked(start - 1); ok && start > 0 {
		t.Fatalf("step %d: the history claims RV %d, below its start %d", step, start-1, start)
	}
}

// listed is the keys of the current state (past false) or of the snapshot
// at rv, in order.
func listed(t *testing.T, s *cacheState, rv uint64, past bool) []string {
	t.Helper()
	var keys []string
	if past {
		state, ok := s.snapshotAt(rv, 0)
		if !ok {
			t.Fatalf("no snapshot at %d, which hasStateAt claims", rv)
		}
		for o := range state.ascend("/pods/", "/pods/") {
			keys = append(keys, o.key+"@"+o.obj.(interface{ GetResourceVersion() string }).GetResourceVersion())
		}
		return keys
	}
	walk, _, _, at := s.listCurrent(context.Background(), "/pods/", "/pods/", storage.ListOptions{Recursive: true, Predicate: storage.Everything})
	if at != rv {
		t.Fatalf("the current list is at %d, want %d", at, rv)
	}
	for o := range walk {
		keys = append(keys, o.key+"@"+o.obj.(interface{ GetResourceVersion() string }).GetResourceVersion())
	}
	return keys
}

func sortedKeys(state map[string]*object) []string {
	var keys []string
	for _, k := range slices.Sorted(maps.Keys(state)) {
		keys = append(keys, k+"@"+state[k].obj.(interface{ GetResourceVersion() string }).GetResourceVersion())
	}
	return keys
}
