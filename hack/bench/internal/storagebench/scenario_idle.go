package storagebench

import (
	"context"
	"runtime"
	"time"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
)

// Idle opens n bookmark-enabled watches that see no events and reports what
// each costs in memory and goroutines, and how long opening them all took.
// Decorator None is the floor any watch costs (a consumer goroutine ranging
// over an unbuffered channel); the parent subtracts it to get the cache's own
// per-watcher cost.
func Idle(ctx context.Context, env Env, decorator string, n int) ([]result.Result, error) {
	rec := result.NewRecorder("idle", Level, decorator, map[string]int{"watchers": n})
	if decorator == None {
		idleBaseline(rec, n)
		return rec.Results(), nil
	}
	s, opts, destroy, err := openForFleet(ctx, env, decorator)
	if err != nil {
		return nil, err
	}
	defer destroy()

	waitGoroutinesSettle(500*time.Millisecond, 5*time.Second)
	bytesBefore, goroutinesBefore := heapStackBytes(), runtime.NumGoroutine()
	f, openTime, err := openFleet(ctx, s, n, opts, nil)
	if err != nil {
		return nil, err
	}
	defer f.stop()
	goroutinesAfter := waitGoroutinesSettle(time.Second, 30*time.Second)
	bytesAfter := heapStackBytes()

	rec.Add("heap_stack_bytes_per_watcher", perWatcher(float64(bytesAfter)-float64(bytesBefore), n), "B", result.Lower)
	rec.Add("goroutines_per_watcher", perWatcher(float64(goroutinesAfter-goroutinesBefore), n), "goroutines", result.Lower)
	rec.Add("open_seconds", openTime.Seconds(), "s", result.Lower)
	rec.Add("watchers_closed", float64(f.closed.Load()), "watchers", result.Lower)
	f.report()
	return rec.Results(), nil
}

// idleBaseline is the same measurement with no storage at all: n consumers
// ranging over unbuffered channels, what any watch costs at minimum.
func idleBaseline(rec *result.Recorder, n int) {
	waitGoroutinesSettle(500*time.Millisecond, 5*time.Second)
	bytesBefore, goroutinesBefore := heapStackBytes(), runtime.NumGoroutine()
	start := time.Now()
	chans := make([]chan struct{}, 0, n)
	done := make(chan struct{}, n)
	for range n {
		ch := make(chan struct{})
		chans = append(chans, ch)
		go func() {
			for range ch {
			}
			done <- struct{}{}
		}()
	}
	openTime := time.Since(start)
	goroutinesAfter := waitGoroutinesSettle(time.Second, 30*time.Second)
	bytesAfter := heapStackBytes()
	for _, ch := range chans {
		close(ch)
	}
	for range n {
		<-done
	}
	rec.Add("heap_stack_bytes_per_watcher", perWatcher(float64(bytesAfter)-float64(bytesBefore), n), "B", result.Lower)
	rec.Add("goroutines_per_watcher", perWatcher(float64(goroutinesAfter-goroutinesBefore), n), "goroutines", result.Lower)
	rec.Add("open_seconds", openTime.Seconds(), "s", result.Lower)
}

func perWatcher(total float64, n int) float64 { return total / float64(n) }
