package storagebench

import (
	"context"
	"runtime"
	"time"

	"k8s.io/apiserver/pkg/storage"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
)

// Idle opens n bookmark-enabled watches that see no events and reports what
// each costs in memory and goroutines, and how long opening them all took.
// Decorator None is the floor any watch costs (a consumer goroutine ranging
// over an unbuffered channel); the parent subtracts it to get the cache's own
// per-watcher cost.
func Idle(ctx context.Context, env Env, decorator string, n int) ([]result.Result, error) {
	fig := newFigures("idle", decorator, map[string]int{"watchers": n})
	if decorator == None {
		idleBaseline(fig, n)
		return fig.out, nil
	}
	s, destroy, err := openStorage(ctx, env, decorator)
	if err != nil {
		return nil, err
	}
	defer destroy()
	rv, _, err := currentRV(ctx, s)
	if err != nil {
		return nil, err
	}
	pred := storage.Everything
	pred.AllowWatchBookmarks = true
	opts := storage.ListOptions{ResourceVersion: rv, Recursive: true, Predicate: pred}

	waitGoroutinesSettle(500*time.Millisecond, 5*time.Second)
	bytesBefore, goroutinesBefore := heapStackBytes(), runtime.NumGoroutine()
	f := newFleet(n)
	start := time.Now()
	err = f.open(ctx, s, n, opts, nil)
	openTime := time.Since(start)
	defer f.stop()
	if err != nil {
		return nil, err
	}
	goroutinesAfter := waitGoroutinesSettle(time.Second, 30*time.Second)
	bytesAfter := heapStackBytes()

	fig.add("heap_stack_bytes_per_watcher", perWatcher(float64(bytesAfter)-float64(bytesBefore), n), "B", lower)
	fig.add("goroutines_per_watcher", perWatcher(float64(goroutinesAfter-goroutinesBefore), n), "goroutines", lower)
	fig.add("open_seconds", openTime.Seconds(), "s", lower)
	fig.add("watchers_closed", float64(f.closed.Load()), "watchers", lower)
	f.report()
	return fig.out, nil
}

// idleBaseline is the same measurement with no storage at all: n consumers
// ranging over unbuffered channels, what any watch costs at minimum.
func idleBaseline(fig *figures, n int) {
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
	fig.add("heap_stack_bytes_per_watcher", perWatcher(float64(bytesAfter)-float64(bytesBefore), n), "B", lower)
	fig.add("goroutines_per_watcher", perWatcher(float64(goroutinesAfter-goroutinesBefore), n), "goroutines", lower)
	fig.add("open_seconds", openTime.Seconds(), "s", lower)
}

func perWatcher(total float64, n int) float64 { return total / float64(n) }
