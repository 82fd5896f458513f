package httpbench

import (
	"context"
	"fmt"
	"net/http"
)

// serverSample is the server process seen at one instant.
type serverSample struct {
	cpuSeconds float64 // user + system since the process started
	rssBytes   float64
	heapBytes  float64 // go_memstats_heap_alloc_bytes
	stackBytes float64 // go_memstats_stack_inuse_bytes
	goroutines float64
}

// sampleMemory first makes the server collect its garbage, so heap_alloc
// is the live heap rather than the live heap plus whatever garbage the
// last GC cycle happened to leave; a per-watcher figure from the
// difference of two uncollected heaps is mostly noise. net/http/pprof's
// heap handler runs runtime.GC when asked with gc=1, and the generic
// apiserver serves it (profiling is on by default).
func (s *serverProcess) sampleMemory(ctx context.Context) (serverSample, error) {
	var out serverSample
	code, _, err := s.Get(ctx, "/debug/pprof/heap?gc=1")
	if err != nil {
		return out, fmt.Errorf("forcing a GC in the server: %w", err)
	}
	if code != http.StatusOK {
		return out, fmt.Errorf("forcing a GC in the server: /debug/pprof/heap answered %d (is --profiling off?)", code)
	}
	m, err := s.Metrics(ctx, "go_memstats_heap_alloc_bytes", "go_memstats_stack_inuse_bytes", "go_goroutines")
	if err != nil {
		return out, err
	}
	out.heapBytes, out.stackBytes, out.goroutines = m[0], m[1], m[2]
	rss, err := s.RSSBytes()
	if err != nil {
		return out, err
	}
	out.rssBytes = float64(rss)
	if out.cpuSeconds, err = s.CPUSeconds(); err != nil {
		return out, err
	}
	return out, nil
}

// gcCycles is how many GC cycles the server has completed: with thousands
// of watches its heap is hundreds of MB, and one cycle more or less in a
// window moves that window's CPU by a good part of a second.
func (s *serverProcess) gcCycles(ctx context.Context) (float64, error) {
	m, err := s.Metrics(ctx, "go_gc_duration_seconds_count")
	if err != nil {
		return 0, err
	}
	return m[0], nil
}
