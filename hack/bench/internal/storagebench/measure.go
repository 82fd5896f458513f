package storagebench

import (
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"syscall"
	"time"

	"k8s.io/klog/v2"
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
	m := memStatsAfterGC()
	return m.HeapAlloc + m.StackInuse
}

// memStatsAfterGC are the memory statistics after two collections (see
// heapStackBytes): HeapAlloc is then the live heap, what a heap profile's
// inuse_space samples.
func memStatsAfterGC() runtime.MemStats {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m
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

// StartCPUProfile starts the process's CPU profile, written to path, and
// returns what stops it and closes the file.
func StartCPUProfile(path string) (stop func() error, err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

// profileWindow starts a CPU profile written to path, if path is set, and
// returns what ends it; a failure to start is logged and the run goes on
// unprofiled (another profile may be running: --cpuprofile).
func profileWindow(path string) (stop func()) {
	if path == "" {
		return func() {}
	}
	stopProfile, err := StartCPUProfile(path)
	if err != nil {
		klog.ErrorS(err, "Window CPU profile not taken", "path", path)
		return func() {}
	}
	return func() {
		if err := stopProfile(); err != nil {
			klog.ErrorS(err, "Window CPU profile not saved", "path", path)
		}
	}
}

// gcCycles is how many GC cycles the process has completed.
func gcCycles() uint64 {
	sample := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(sample)
	return sample[0].Value.Uint64()
}

// heapAllocs is how many heap objects the process has allocated, tiny ones
// included: MemStats.Mallocs, what go test's allocs/op counts. It is read
// with ReadMemStats, which stops the world to flush each P's cached spans,
// not with runtime/metrics' /gc/heap/allocs:objects, which counts a span's
// allocations only once its P gives it back: a read lags by up to a span per
// size class per P (1,000 allocations of 32 bytes read as 892).
func heapAllocs() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.Mallocs
}
