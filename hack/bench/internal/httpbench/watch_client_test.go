package httpbench

import (
	"testing"
	"time"
)

// Watches opened over seconds toward one deadline get deadlines within a
// second after it, none before it: the bookmarks scenario's window ends
// before that deadline and must see no watch end in it.
func TestWatchSpecDeadlineAlignsTheWatches(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	spec := watchSpec{deadline: t0.Add(62 * time.Second)}
	for sent := t0; sent.Before(t0.Add(5 * time.Second)); sent = sent.Add(37 * time.Millisecond) {
		timeout := spec.timeoutAt(sent)
		if timeout%time.Second != 0 {
			t.Fatalf("sent at +%v: timeout %v, want whole seconds (timeoutSeconds)", sent.Sub(t0), timeout)
		}
		if end := sent.Add(timeout); end.Before(spec.deadline) || !end.Before(spec.deadline.Add(time.Second)) {
			t.Fatalf("sent at +%v: timeout %v ends at +%v, want within [+62s, +63s)", sent.Sub(t0), timeout, end.Sub(t0))
		}
	}
	if got := (watchSpec{timeout: time.Hour}).timeoutAt(t0); got != time.Hour {
		t.Errorf("without a deadline: timeout %v, want the spec's 1h", got)
	}
}
