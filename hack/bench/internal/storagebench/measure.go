package storagebench

import (
	"runtime"
	"syscall"
	"time"
)

// cpuSeconds is the process's user+system CPU so far. Runs are in their own
// process and etcd in another, so a delta is what the cache and the
// benchmark's consumers cost, nothing else.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return tv(ru.Utime) + tv(ru.Stime)
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// heapStackBytes is live heap plus goroutine stacks after two collections:
// the first may leave finalizer-reachable garbage that the second frees.
func heapStackBytes() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc + m.StackInuse
}

// waitGoroutinesSettle returns once the goroutine count has not changed for
// a while (or at the deadline): watches start goroutines asynchronously, and
// a figure taken mid-start would undercount.
func waitGoroutinesSettle(quiet, atMost time.Duration) int {
	deadline := time.Now().Add(atMost)
	last, since := runtime.NumGoroutine(), time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		if n := runtime.NumGoroutine(); n != last {
			last, since = n, time.Now()
		} else if time.Since(since) >= quiet {
			break
		}
	}
	return last
}
