package feed

import (
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"
)

func TestWatchRetryBudget(t *testing.T) {
	r := watchRetry{window: 30 * time.Second}
	now := cachertest.Epoch
	// The first re-open is immediate, then the backoff grows to its cap.
	var waits []time.Duration
	for range 8 {
		d, ok := r.next(now)
		if !ok {
			t.Fatalf("gave up after %v, inside the window", now.Sub(cachertest.Epoch))
		}
		waits = append(waits, d)
		now = now.Add(time.Second)
	}
	if waits[0] != 0 {
		t.Errorf("first wait %v, want 0", waits[0])
	}
	for i, want := range []time.Duration{100, 200, 400, 800, 1600, 2000, 2000} {
		lo, hi := want*time.Millisecond, want*time.Millisecond*3/2
		if d := waits[i+1]; d < lo || d > hi {
			t.Errorf("wait %d = %v, want in [%v, %v]", i+1, d, lo, hi)
		}
	}
	// Past the window the re-opens go on at the capped backoff.
	if d, within := r.next(cachertest.Epoch.Add(30 * time.Second)); within || d < 2*time.Second || d > 3*time.Second {
		t.Errorf("30s after the first failure: next = %v, within %v; want a capped backoff past the window", d, within)
	}
	// A watch that delivered something restarts the budget.
	r.progressed()
	if d, within := r.next(cachertest.Epoch.Add(40 * time.Second)); !within || d != 0 {
		t.Errorf("after progress: next = %v, %v; want an immediate retry within the window", d, within)
	}
}

func TestClassifyWatchError(t *testing.T) {
	for _, tc := range []struct {
		err       error
		transient bool
	}{
		{apierrors.NewInternalError(fmt.Errorf("etcdserver: no leader")), true},
		{apierrors.NewServiceUnavailable("x"), true},
		{apierrors.NewTimeoutError("x", 1), true},
		{fmt.Errorf("watching pods from 5: %w", apierrors.NewInternalError(fmt.Errorf("x"))), true},
		{errWatchClosed, true},
		{apierrors.NewResourceExpired("compacted"), false},
		{fmt.Errorf("watching pods from 5: %w", apierrors.NewResourceExpired("x")), false},
		{silentError(time.Second), true},
		{fmt.Errorf("%w: 2 keys differ", ErrInconsistent), false},
		{fmt.Errorf("computing the key: boom"), false},
	} {
		if got := isTransient(classifyWatchError(tc.err)); got != tc.transient {
			t.Errorf("%v: transient = %v, want %v", tc.err, got, tc.transient)
		}
	}
}
