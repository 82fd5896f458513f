package cacher

import (
	"testing"
	"time"
)

// TestProgressChannelOnlyForWaiters: moving the RV makes no channel when
// nobody waits for it (most writes), and a waiter's channel is closed by
// the next move and replaced for the one after.
func TestProgressChannelOnlyForWaiters(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	f := newFilledState(t, 10, time.Hour, now)
	s := f.s
	rv := f.rv
	if got := testing.AllocsPerRun(100, func() { rv++; s.advance(rv) }); got != 0 {
		t.Errorf("moving the RV with nobody waiting made %.1f allocations, want 0", got)
	}

	at, first := s.progress()
	if _, again := s.progress(); again != first {
		t.Fatal("two waiters before a move got different channels, want one shared")
	}
	select {
	case <-first:
		t.Fatal("the channel was closed before the RV moved")
	default:
	}
	s.advance(at + 1)
	select {
	case <-first:
	default:
		t.Fatal("moving the RV did not close the waiter's channel")
	}
	next, second := s.progress()
	if next != at+1 {
		t.Fatalf("progress after the move at %d, want %d", next, at+1)
	}
	select {
	case <-second:
		t.Fatal("the channel after a move is already closed")
	default:
	}
	s.advance(at) // not forward: no wake-up
	select {
	case <-second:
		t.Fatal("an RV that did not move closed the channel")
	default:
	}
}
