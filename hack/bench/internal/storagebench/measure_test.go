package storagebench

import (
	"runtime"
	"testing"
)

type allocProbe struct{ next *allocProbe }

// heapAllocs counts every allocation up to its read: exactkey's
// allocs_per_write is its delta over a round, read while the last
// allocations still sit in the Ps' cached spans.
func TestHeapAllocsCountsEachAllocation(t *testing.T) {
	const n = 1000
	var keep *allocProbe
	runtime.GC()
	before := heapAllocs()
	for range n {
		keep = &allocProbe{next: keep}
	}
	got := heapAllocs() - before
	runtime.KeepAlive(keep)
	// The loop's n, and whatever else the process allocated meanwhile
	// (the test runner's goroutines): a little more, never less.
	if got < n || got > 2*n {
		t.Errorf("heapAllocs grew by %d over %d allocations, want %d to %d", got, n, n, 2*n)
	}
}
