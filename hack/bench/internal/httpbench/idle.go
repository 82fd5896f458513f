package httpbench

import (
	"context"
	"fmt"
	"time"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
)

// idleWatchTimeout is far beyond any idle run, so no watch reaches its
// deadline (nor its pre-deadline bookmark) while measured.
const idleWatchTimeout = time.Hour

// Idle opens watchers bookmark-enabled watches on widgets, from the current
// resourceVersion so none has initial events, and reports what they cost
// the server while nothing happens: heap+stack and goroutines per watcher
// (after a GC, from before opening to after a settle), RSS per watcher, and
// how long opening them all took. The per-watcher figures include the
// HTTP/2 connection each 100 watches share, as a real client's would.
func Idle(ctx context.Context, env Env, decorator string, watchers int) ([]result.Result, error) {
	if watchers <= 0 {
		return nil, fmt.Errorf("idle: watchers = %d, want > 0", watchers)
	}
	rec := result.NewRecorder("idle", Level, decorator, map[string]int{"watchers": watchers})
	err := withServer(ctx, env, "idle", decorator, func(s *serverProcess) error {
		_, rv, err := s.clientAtWidgetsRV(ctx)
		if err != nil {
			return err
		}
		before, err := s.sampleMemory(ctx)
		if err != nil {
			return err
		}
		start := time.Now()
		ws, err := openWatches(ctx, s, watchSpec{path: widgetsPath, resourceVersion: rv, timeout: idleWatchTimeout}, watchers, nil)
		if err != nil {
			return err
		}
		defer ws.stop()
		opened := time.Since(start)
		if err := sleepCtx(ctx, settle(env)); err != nil {
			return err
		}
		after, err := s.sampleMemory(ctx)
		if err != nil {
			return err
		}
		closed := ws.closed.Load()
		ws.stop()
		s.noteCloses(ws)

		n := float64(watchers)
		rec.Add("heap_stack_bytes_per_watcher", (after.heapBytes+after.stackBytes-before.heapBytes-before.stackBytes)/n, "bytes", result.Lower)
		// The two halves apart: the stacks are mostly the HTTP serving
		// goroutines, the heap is where the caches differ.
		rec.Add("heap_bytes_per_watcher", (after.heapBytes-before.heapBytes)/n, "bytes", result.Lower)
		rec.Add("stack_bytes_per_watcher", (after.stackBytes-before.stackBytes)/n, "bytes", result.Lower)
		rec.Add("goroutines_per_watcher", (after.goroutines-before.goroutines)/n, "goroutines", result.Lower)
		rec.Add("rss_bytes_per_watcher", (after.rssBytes-before.rssBytes)/n, "bytes", result.Lower)
		rec.Add("open_seconds", opened.Seconds(), "s", result.Lower)
		rec.Add("watchers_closed", float64(closed), "watchers", result.Lower)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return rec.Results(), nil
}
