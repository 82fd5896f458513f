package cacher

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/klog/v2"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"
	"github.com/watchkeeper/watchkeeper/internal/fixtures"
)

// TestMain fails the run, through goleak, if any goroutine outlives the
// tests. Every test cacher's cleanup also checks, with
// expectNoCacherGoroutines, that Stop left none of the cacher's goroutines
// (nor any the test started) behind: that names the test that leaked, which
// the check at the end cannot.
func TestMain(m *testing.M) {
	flag.Parse()
	if !testing.Verbose() {
		// The cache logs every start and list; keep failures readable.
		fs := flag.NewFlagSet("klog", flag.ContinueOnError)
		klog.InitFlags(fs)
		_ = fs.Set("logtostderr", "false")
		_ = fs.Set("stderrthreshold", "FATAL")
		klog.SetOutput(io.Discard)
	}
	goleak.VerifyTestMain(m,
		// klog's flush daemon lives for the process. klog starts it the
		// first time it writes a log file, or when logging is set up with
		// StartFlushDaemon (component-base's logs.InitLogs does); the tests
		// here do neither today, but it is never ours to stop.
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	)
}

// cacherGoroutine is a goroutine running this package's code, other than a
// test blocked in t.Run: the cacher's own goroutines and any a test started.
func cacherGoroutine(g cachertest.Goroutine) bool {
	// The goroutines running the tests themselves (benchmarks run on the
	// main one, under TestMain) are not the cacher's.
	// The prefix takes in the cache's internal packages (a watcher's pump).
	return strings.Contains(g.Stack, "github.com/watchkeeper/watchkeeper/cacher") &&
		!strings.Contains(g.Stack, "testing.(*T).Run(") && !strings.Contains(g.Stack, "testing.(*B).Run(")
}

func expectNoCacherGoroutines(t testing.TB) {
	t.Helper()
	if leaked := cachertest.WaitForLeaks(cacherGoroutine); len(leaked) > 0 {
		t.Errorf("%d goroutines of the cacher (or of the test) still run:\n\n%s", len(leaked), strings.Join(leaked, "\n\n"))
	}
}

func isPump(g cachertest.Goroutine) bool { return strings.Contains(g.Stack, "hub.(*Watcher).pump") }

// pumps counts the watcher pump goroutines running now.
func pumps() int {
	n := 0
	for _, g := range cachertest.OtherGoroutines() {
		if isPump(g) {
			n++
		}
	}
	return n
}

func expectNoWatcherGoroutines(t *testing.T) {
	t.Helper()
	if leaked := cachertest.WaitForLeaks(isPump); len(leaked) > 0 {
		t.Errorf("%d watcher goroutines still run after their watchers ended:\n\n%s", len(leaked), strings.Join(leaked, "\n\n"))
	}
}

// The cacher under test.

type testCacher struct {
	*Cacher
	fs  *cachertest.FakeStorage
	clk *testingclock.FakeClock
	// stopHung is set when Stop did not return: the cleanup must not call
	// it again (sync.Once would block on the first call).
	stopHung atomic.Bool
}

// newTestCacher starts a cacher over fs on a fake clock at cachertest.Epoch, with
// a 1s granularity and no jitter, and stops it when the test ends. Each test
// (or subtest) owns its cacher: the goroutine check in the cleanup looks at
// every cacher goroutine.
func newTestCacher(t testing.TB, fs *cachertest.FakeStorage, mutate func(*Config)) *testCacher {
	t.Helper()
	clk := testingclock.NewFakeClock(cachertest.Epoch)
	cfg := Config{
		Storage:                   fs,
		GroupResource:             schema.GroupResource{Resource: "pods"},
		ResourcePrefix:            "/pods/",
		KeyFunc:                   cachertest.PodKey,
		NewFunc:                   func() kruntime.Object { return &example.Pod{} },
		NewListFunc:               func() kruntime.Object { return &example.PodList{} },
		GetAttrsFunc:              cachertest.PodAttrs,
		Clock:                     clk,
		BookmarkFrequency:         time.Minute,
		BookmarkPreDeadlineOffset: 2 * time.Second,
		BookmarkGranularity:       time.Second,
		BookmarkJitter:            0,
		EventsHistoryWindow:       75 * time.Second,
		HistoryCapacity:           100_000,
		WatcherBuffer:             DefaultWatcherBuffer,
		// The options' default (stall.go); tests of closing turn it off.
		StallSlowWatchers: true,
		// The fake clock runs far ahead of a fake storage that says
		// nothing: off here; feed_storage_liveness_test.go turns it on.
		StorageSilenceTimeout: 0,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	if fixtures.CompactTests() {
		cfg.Compact = true
		if cfg.Codec == nil {
			cfg.Codec = fixtures.ProtoCodec
		}
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	tc := &testCacher{Cacher: c, fs: fs, clk: clk}
	t.Cleanup(func() {
		if tc.stopHung.Load() {
			return
		}
		c.Stop()
		expectNoCacherGoroutines(t)
	})
	return tc
}

// stopWithin calls Stop and fails the test unless it returns within
// waitFor; then release (if any) is called to unblock it.
func (tc *testCacher) stopWithin(t *testing.T, why string, release func()) {
	t.Helper()
	stopped := make(chan struct{})
	go func() {
		tc.Stop()
		close(stopped)
	}()
	select {
	case <-stopped:
		return
	case <-time.After(cachertest.WaitFor):
	}
	t.Errorf("Stop still blocked after %v: %s", cachertest.WaitFor, why)
	if release != nil {
		release()
		select {
		case <-stopped:
			return
		case <-time.After(cachertest.WaitFor):
		}
	}
	tc.stopHung.Store(true)
	t.FailNow()
}

func (tc *testCacher) waitReady(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cachertest.WaitFor)
	defer cancel()
	if err := tc.WaitReady(ctx); err != nil {
		t.Fatalf("cache not ready: %v", err)
	}
}

// waitRV waits until the cache has applied rv.
func (tc *testCacher) waitRV(t *testing.T, rv uint64) {
	t.Helper()
	cachertest.Poll(t, fmt.Sprintf("the cache to reach RV %d", rv), func() bool { return tc.state.CurrentRV() >= rv })
}

// cacheTimers is how many timers an idle cache arms on its clock: the
// bookmark tick and the feed checks (feed_checks.go).
const cacheTimers = 2

// waitWaiters waits until exactly n timers wait on the fake clock.
func (tc *testCacher) waitWaiters(t *testing.T, n int) {
	t.Helper()
	cachertest.Poll(t, fmt.Sprintf("%d waiters on the fake clock", n), func() bool { return tc.clk.Waiters() == n })
}

// stepTicks steps the fake clock one granularity (1s) at a time, n times,
// each time waiting for the dispatcher to have handled the tick and the
// feed checks to have run (both every second here): each timer fires on
// the step and is re-armed only after its work ran, and they are the only
// timers armed. After each tick, check runs with the step's
// number (from 1).
func (tc *testCacher) stepTicks(t *testing.T, n int, check func(step int)) {
	t.Helper()
	for step := 1; step <= n; step++ {
		tc.waitWaiters(t, cacheTimers)
		tc.clk.Step(time.Second)
		tc.waitWaiters(t, cacheTimers)
		if check != nil {
			check(step)
		}
	}
}

// watchResult is what one Watch call returned.
type watchResult struct {
	w   watch.Interface
	err error
}

// watchAsync calls c.Watch on a goroutine of its own, for a watch that waits
// (for a backfill, for the cache to be fresh) on what the test does next.
func watchAsync(c *testCacher, key string, opts storage.ListOptions) <-chan watchResult {
	done := make(chan watchResult, 1)
	go func() {
		w, err := c.Watch(context.Background(), key, opts)
		done <- watchResult{w, err}
	}()
	return done
}

// startWatch watches every pod and stops the watch when the test ends.
func (tc *testCacher) startWatch(t *testing.T, ctx context.Context, rv string, pred storage.SelectionPredicate) watch.Interface {
	t.Helper()
	w, err := tc.Watch(ctx, "/pods/", storage.ListOptions{ResourceVersion: rv, Recursive: true, Predicate: pred})
	if err != nil {
		t.Fatalf("Watch(rv=%q): %v", rv, err)
	}
	t.Cleanup(w.Stop)
	return w
}

// Reading watches.
