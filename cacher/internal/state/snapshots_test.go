package state

import (
	"testing"
	"time"
)

// TestSnapshotsKeepCheckpointsOnly: the states of many RVs cost a clone
// every checkpointEvery of them, and the window and the history's start
// age states and checkpoints out together.
func TestSnapshotsKeepCheckpointsOnly(t *testing.T) {
	s := snapshots{window: time.Minute}
	tree := newOrderedObjects()
	start := time.Unix(1000, 0)
	for i := range 10 * CheckpointEvery {
		s.add(uint64(100+i), start.Add(time.Duration(i)*time.Millisecond), tree.clone)
	}
	if got, want := len(s.checkpoints), 10; got != want {
		t.Fatalf("%d checkpoints for %d states, want %d", got, s.len(), want)
	}
	at, from, ok := s.checkpointFor(100)
	if !ok || at != 100 || from.rv != 100+CheckpointEvery-1 {
		t.Fatalf("state at 100 from checkpoint %d (at %d, %v), want from %d", from.rv, at, ok, 100+CheckpointEvery-1)
	}
	newest := uint64(100 + 10*CheckpointEvery - 1)
	if _, from, _ := s.checkpointFor(newest); from.rv != newest {
		t.Fatalf("newest state from checkpoint %d, want %d", from.rv, newest)
	}
	s.forgetBelow(100 + 3*CheckpointEvery)
	if !s.covers(100+3*CheckpointEvery) || s.covers(100+3*CheckpointEvery-1) {
		t.Fatalf("after forgetBelow: covers from %d", s.rvs[0])
	}
	for _, cp := range s.checkpoints {
		if cp.rv < s.rvs[0] {
			t.Fatalf("checkpoint %d kept below the oldest state %d", cp.rv, s.rvs[0])
		}
	}
	// Two minutes later: only the newest state is inside the window.
	s.add(newest+1, start.Add(2*time.Minute), tree.clone)
	if s.len() != 1 || len(s.checkpoints) != 0 || !s.covers(newest+1) || s.covers(newest) {
		t.Fatalf("after the window: %d states from %v, %d checkpoints", s.len(), s.rvs, len(s.checkpoints))
	}
	if _, from, ok := s.checkpointFor(newest + 5); !ok || from.rv != newest+1 {
		t.Fatalf("state above the newest from %d (%v), want the latest clone", from.rv, ok)
	}
}

// A compaction drops the states etcd no longer reads, but not the one that
// is the state at the compaction itself (nothing changed between them).
func TestSnapshotsForgetCompacted(t *testing.T) {
	s := snapshots{window: time.Minute}
	tree := newOrderedObjects()
	at := time.Unix(1000, 0)
	for _, rv := range []uint64{90, 110, 120} {
		s.add(rv, at, tree.clone)
	}
	s.forgetCompacted(50)
	if !s.covers(90) {
		t.Fatalf("a compaction below every state dropped some: covers from %v", s.rvs)
	}
	s.forgetCompacted(100)
	if !s.covers(100) || s.covers(89) {
		t.Fatalf("after compacting at 100: states %v, want 90 kept as the state at 100", s.rvs)
	}
	s.forgetCompacted(110)
	if s.covers(109) || !s.covers(110) {
		t.Fatalf("after compacting at 110: states %v, want from 110", s.rvs)
	}
	s.forgetCompacted(500)
	if !s.covers(120) || s.len() != 1 {
		t.Fatalf("after compacting past every state: states %v, want the newest kept", s.rvs)
	}
}
