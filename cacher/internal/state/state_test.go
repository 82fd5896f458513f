package state

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

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachemetrics"
	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"
	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
)

// TestCacheStateInvariants drives a State alone, the way the reflector
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
	s := New("/pods/", nil, time.Hour, 10_000, true, cachemetrics.NewResource(schema.GroupResource{Resource: "pods"}, time.Minute), now)
	obj := func(name string, rv uint64) *objects.Object {
		pod := cachertest.NewPod(name, rv, map[string]string{"rv": fmt.Sprint(rv)}, "")
		return objects.NewDecoded("/pods/"+cachertest.Namespace+"/"+name, pod, nil, nil)
	}

	model := map[string]*objects.Object{} // key -> the object held
	var list []any
	for i := range 10 {
		o := obj(fmt.Sprintf("pod-%02d", i), listRV)
		model[o.Key] = o
		list = append(list, o)
	}
	s.mu.Lock()
	if err := s.resetLocked(list, listRV, now); err != nil {
		t.Fatal(err)
	}
	s.mu.Unlock()
	states := map[uint64]map[string]*objects.Object{listRV: maps.Clone(model)}
	var applied []*objects.Event // every event since the list, in order

	rng := rand.New(rand.NewSource(1))
	rv := uint64(listRV)
	for step := range 400 { // 400 % 10 == 0: the last step checks the past states
		before, advanced := s.Progress()
		switch {
		case step == 200:
			// The history's oldest hundred go, as though for room.
			s.DropHistoryThrough(listRV + 100)
		case rng.Intn(10) == 0:
			// Progress: rv moves, nothing changes.
			rv++
			s.Advance(rv)
			states[rv] = maps.Clone(model)
		default:
			// Now and then a transaction: several events at one RV.
			if step == 0 || rng.Intn(4) != 0 {
				rv++
			}
			cur := obj(fmt.Sprintf("pod-%02d", rng.Intn(20)), rv)
			e := &objects.Event{Type: watch.Modified, RV: rv, Cur: cur, RecordedNanos: now.UnixNano()}
			_, held := model[cur.Key]
			switch {
			case held && rng.Intn(3) == 0, !held && rng.Intn(5) == 0:
				e.Type = watch.Deleted
				delete(model, cur.Key)
			case !held:
				e.Type = watch.Added
				model[cur.Key] = cur
			default:
				model[cur.Key] = cur
			}
			// linkPrev, without a trigger.
			if e.Prev = s.Peek(cur.Key); e.Type == watch.Deleted && e.Prev == nil {
				e.Prev = e.Cur
			}
			if _, err := s.Apply(e, now); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			applied = append(applied, e)
			states[rv] = maps.Clone(model)
		}
		now = now.Add(time.Second)

		gotRV, _ := s.Progress()
		if gotRV != rv {
			t.Fatalf("step %d: rv %d, want %d", step, gotRV, rv)
		}
		if moved := rv != before; moved != cachertest.Closed(advanced) {
			t.Fatalf("step %d: rv %d to %d, advanced closed %v", step, before, rv, cachertest.Closed(advanced))
		}
		checkHeld(t, step, s, model)
		checkHistory(t, step, s, applied)
		// The current state, and the past states the snapshots cover.
		if got := listed(t, s, rv, false); !slices.Equal(got, sortedKeys(model)) {
			t.Fatalf("step %d: a list of the current state has %v, want %v", step, got, sortedKeys(model))
		}
		for at, state := range states {
			if (step%10 != 9 && step != 200) || !s.HasStateAt(at, 0) {
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
func checkHeld(t *testing.T, step int, s *State, model map[string]*objects.Object) {
	t.Helper()
	s.mu.RLock()
	defer s.mu.RUnlock()
	ordered := s.ordered.under("/pods/")
	if len(ordered) != len(model) || s.ordered.len() != len(model) || len(s.store.ListKeys()) != len(model) {
		t.Fatalf("step %d: ordered holds %d (len %d), store %d, want %d", step, len(ordered), s.ordered.len(), len(s.store.ListKeys()), len(model))
	}
	for _, o := range ordered {
		item, ok, _ := s.store.GetByKey(o.Key)
		if !ok || item.(*objects.Object) != o || model[o.Key] != o {
			t.Fatalf("step %d: %s: ordered and store or the model hold different objects", step, o.Key)
		}
	}
}

// checkHistory checks that the history holds the applied events of
// (startRV, rv], in order, with what each changed from.
func checkHistory(t *testing.T, step int, s *State, applied []*objects.Event) {
	t.Helper()
	s.mu.RLock()
	defer s.mu.RUnlock()
	start := s.HistoryStartLocked()
	got, ok := s.SinceLocked(start)
	if !ok {
		t.Fatalf("step %d: the history does not cover its own start %d", step, start)
	}
	var want []*objects.Event
	for _, e := range applied {
		if e.RV > start {
			want = append(want, e)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("step %d: the history from %d holds %d events, want %d", step, start, len(got), len(want))
	}
	if len(got) > 0 && got[len(got)-1].RV > s.RVLocked() {
		t.Fatalf("step %d: the history holds rv %d above the state's %d", step, got[len(got)-1].RV, s.RVLocked())
	}
	if _, ok := s.SinceLocked(start - 1); ok && start > 0 {
		t.Fatalf("step %d: the history claims RV %d, below its start %d", step, start-1, start)
	}
}

// listed is the keys of the current state (past false) or of the snapshot
// at rv, in order.
func listed(t *testing.T, s *State, rv uint64, past bool) []string {
	t.Helper()
	var keys []string
	if past {
		state, ok := s.SnapshotAt(rv, 0)
		if !ok {
			t.Fatalf("no snapshot at %d, which hasStateAt claims", rv)
		}
		for o := range state.Ascend("/pods/", "/pods/") {
			keys = append(keys, o.Key+"@"+o.Decoded().(interface{ GetResourceVersion() string }).GetResourceVersion())
		}
		return keys
	}
	walk, _, _, at := s.ListCurrent(context.Background(), "/pods/", "/pods/", storage.ListOptions{Recursive: true, Predicate: storage.Everything})
	if at != rv {
		t.Fatalf("the current list is at %d, want %d", at, rv)
	}
	for o := range walk {
		keys = append(keys, o.Key+"@"+o.Decoded().(interface{ GetResourceVersion() string }).GetResourceVersion())
	}
	return keys
}

func sortedKeys(state map[string]*objects.Object) []string {
	var keys []string
	for _, k := range slices.Sorted(maps.Keys(state)) {
		keys = append(keys, k+"@"+state[k].Decoded().(interface{ GetResourceVersion() string }).GetResourceVersion())
	}
	return keys
}

// filledState is a State listed with n pods at RV 100 (window and
// the clock's start as given), and update, which applies a MODIFIED of
// the i-th write's pod (a fixed stride over them) at the next RV.
type filledState struct {
	s    *State
	held []*objects.Object
	rv   uint64
}

func newFilledState(tb testing.TB, n int, window time.Duration, now time.Time) *filledState {
	s := New("/pods/", nil, window, 100_000, true, cachemetrics.NewResource(schema.GroupResource{Resource: "pods"}, time.Minute), now)
	f := &filledState{s: s, held: make([]*objects.Object, n), rv: 100}
	list := make([]any, n)
	for i := range f.held {
		pod := cachertest.NewPod(cachertest.PodName(i), 100, nil, "")
		f.held[i] = objects.NewDecoded("/pods/"+cachertest.Namespace+"/"+pod.Name, pod, nil, nil)
		list[i] = f.held[i]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.resetLocked(list, 100, now); err != nil {
		tb.Fatal(err)
	}
	return f
}

func (f *filledState) update(tb testing.TB, i int, now time.Time) {
	f.rv++
	k := (i * 7919) % len(f.held)
	prev := f.held[k]
	cur := objects.NewDecoded(prev.Key, prev.Decoded(), nil, nil)
	if _, err := f.s.Apply(&objects.Event{Type: watch.Modified, RV: f.rv, Cur: cur, Prev: prev, RecordedNanos: now.UnixNano()}, now); err != nil {
		tb.Fatal(err)
	}
	f.held[k] = cur
}

// BenchmarkStateApply is the apply path alone (store, ordered index,
// history, snapshots) for updates of random objects at 100 writes a second
// on a fake clock, with snapshots on and no list or watch reading the
// state: the cache's own cost per write that the exact-key bench measures
// over the floor, without etcd, decoding or dispatch (op = one event).
func BenchmarkStateApply(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("objects=%d", n), func(b *testing.B) {
			now := time.Unix(1_700_000_000, 0)
			f := newFilledState(b, n, 75*time.Second, now)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				now = now.Add(10 * time.Millisecond)
				f.update(b, i, now)
			}
		})
	}
}

// TestStateClonesOnlyForReaders: a write copies the ordered index's B-tree
// nodes on its path only where a clone taken since (a checkpoint's, or a
// reader's) still shares them. Writes nobody reads take no clone between
// checkpoints, so after a checkpoint the root and the inner nodes are
// copied once and each write copies at most its leaf; reads between two
// writes share one clone; a read after a write sees it.
func TestStateClonesOnlyForReaders(t *testing.T) {
	const n = 10_000
	now := time.Unix(1_700_000_000, 0)
	f := newFilledState(t, n, time.Hour, now)
	s, i := f.s, 0
	write := func() {
		i++
		f.update(t, i, now)
	}
	// Past the first checkpoint, so the writes measured below copy no
	// node a checkpoint shares but their own first ones.
	for range 2 * CheckpointEvery {
		write()
	}
	// Each write: the event and its object (2), and at most its leaf (node
	// and items: 2). A clone per write would copy the whole path, root and
	// inner nodes too (2-3 allocations a level).
	if got := testing.AllocsPerRun(CheckpointEvery-2, write); got > 4.5 {
		t.Errorf("a write nobody read made %.1f allocations, want at most 4: it copied more of the tree than its leaf", got)
	}

	opts := storage.ListOptions{Recursive: true, Predicate: cachertest.Everything(false)}
	walk := func() (tree orderedObjects, got int) {
		w, _, _, _ := s.ListCurrent(context.Background(), "/pods/", "/pods/", opts)
		for range w {
			got++
		}
		s.mu.RLock()
		defer s.mu.RUnlock()
		return s.current, got
	}
	first, _ := walk()
	second, _ := walk()
	if first.tree == nil || first.tree != second.tree {
		t.Fatalf("two lists with no write between took clones %p and %p, want one shared", first.tree, second.tree)
	}
	prev := f.held[0]
	s.Apply(&objects.Event{Type: watch.Deleted, RV: f.rv + 1, Cur: prev, Prev: prev, RecordedNanos: now.UnixNano()}, now)
	if after, got := walk(); after.tree == first.tree || got != n-1 {
		t.Fatalf("a list after a deletion walked %d objects (clone %p, before %p), want %d from a new clone", got, after.tree, first.tree, n-1)
	}
}

// TestProgressChannelOnlyForWaiters: moving the RV makes no channel when
// nobody waits for it (most writes), and a waiter's channel is closed by
// the next move and replaced for the one after.
func TestProgressChannelOnlyForWaiters(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	f := newFilledState(t, 10, time.Hour, now)
	s := f.s
	rv := f.rv
	if got := testing.AllocsPerRun(100, func() { rv++; s.Advance(rv) }); got != 0 {
		t.Errorf("moving the RV with nobody waiting made %.1f allocations, want 0", got)
	}

	at, first := s.Progress()
	if _, again := s.Progress(); again != first {
		t.Fatal("two waiters before a move got different channels, want one shared")
	}
	select {
	case <-first:
		t.Fatal("the channel was closed before the RV moved")
	default:
	}
	s.Advance(at + 1)
	select {
	case <-first:
	default:
		t.Fatal("moving the RV did not close the waiter's channel")
	}
	next, second := s.Progress()
	if next != at+1 {
		t.Fatalf("progress after the move at %d, want %d", next, at+1)
	}
	select {
	case <-second:
		t.Fatal("the channel after a move is already closed")
	default:
	}
	s.Advance(at) // not forward: no wake-up
	select {
	case <-second:
		t.Fatal("an RV that did not move closed the channel")
	default:
	}
}
