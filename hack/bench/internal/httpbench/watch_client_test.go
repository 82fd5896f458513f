package httpbench

import (
	"testing"
	"time"
)

// Watches opened over seconds toward one deadline get deadlines less than
// deadlineSpread after it, none before it: the bookmarks scenario's window
// ends before that deadline, and every watch's pre-deadline bookmark must
// fall due in one slot, well before it.
func TestWatchSpecDeadlineAlignsTheWatches(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	spec := watchSpec{deadline: t0.Add(62*time.Second - time.Millisecond)}
	waited := false
	for now := t0; now.Before(t0.Add(5 * time.Second)); now = now.Add(37 * time.Millisecond) {
		sent := spec.sendAt(now)
		if sent.Before(now) || sent.Sub(now) >= time.Second {
			t.Fatalf("at +%v: send at +%v, want within a second from now", now.Sub(t0), sent.Sub(t0))
		}
		waited = waited || sent.After(now)
		timeout := spec.timeoutAt(sent)
		if timeout%time.Second != 0 {
			t.Fatalf("sent at +%v: timeout %v, want whole seconds (timeoutSeconds)", sent.Sub(t0), timeout)
		}
		if late := sent.Add(timeout).Sub(spec.deadline); late < 0 || late >= deadlineSpread {
			t.Fatalf("sent at +%v: timeout %v ends %v after the deadline, want within [0, %v)", sent.Sub(t0), timeout, late, deadlineSpread)
		}
	}
	if !waited {
		t.Error("no request over 5s of opening waited for its turn")
	}
	if got := spec.sendAt(t0); !got.Equal(t0) {
		t.Errorf("the first request waits until +%v, want it sent at once", got.Sub(t0))
	}
	none := watchSpec{timeout: time.Hour}
	if got := none.timeoutAt(t0); got != time.Hour {
		t.Errorf("without a deadline: timeout %v, want the spec's 1h", got)
	}
	if got := none.sendAt(t0); !got.Equal(t0) {
		t.Errorf("without a deadline: send at +%v, want at once", got.Sub(t0))
	}
}
