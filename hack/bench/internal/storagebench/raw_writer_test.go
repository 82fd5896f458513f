package storagebench

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// A cancelled context ends the wait even while progress keeps moving (a
// stall would never come).
func TestWaitForEndsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var progress atomic.Int64
	done := make(chan bool, 1)
	go func() {
		done <- waitFor(ctx, &progress, time.Hour, func() bool {
			progress.Add(1)
			return false
		})
	}()
	select {
	case ok := <-done:
		if ok {
			t.Fatal("waitFor reported the condition held")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waitFor still polling 10s after its context was cancelled")
	}
}
