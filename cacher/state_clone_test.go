package cacher

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
)

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
	for range 2 * checkpointEvery {
		write()
	}
	// Each write: the event and its object (2), and at most its leaf (node
	// and items: 2). A clone per write would copy the whole path, root and
	// inner nodes too (2-3 allocations a level).
	if got := testing.AllocsPerRun(checkpointEvery-2, write); got > 4.5 {
		t.Errorf("a write nobody read made %.1f allocations, want at most 4: it copied more of the tree than its leaf", got)
	}

	opts := storage.ListOptions{Recursive: true, Predicate: everything(false)}
	walk := func() (tree orderedObjects, got int) {
		w, _, _, _ := s.listCurrent(context.Background(), "/pods/", "/pods/", opts)
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
	s.apply(&event{typ: watch.Deleted, rv: f.rv + 1, cur: prev, prev: prev, recordedNanos: now.UnixNano()}, now)
	if after, got := walk(); after.tree == first.tree || got != n-1 {
		t.Fatalf("a list after a deletion walked %d objects (clone %p, before %p), want %d from a new clone", got, after.tree, first.tree, n-1)
	}
}
