package cacher

import (
	"context"
	"flag"
	"fmt"
	"io"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/klog/v2"
	testingclock "k8s.io/utils/clock/testing"
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

type goroutine struct {
	id    int
	stack string
}

var goroutineHeader = regexp.MustCompile(`^goroutine (\d+) `)

// otherGoroutines is every goroutine but the caller's.
func otherGoroutines() []goroutine {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []goroutine
	for i, stack := range strings.Split(string(buf), "\n\n") {
		if i == 0 { // runtime.Stack puts the caller first
			continue
		}
		m := goroutineHeader.FindStringSubmatch(stack)
		if m == nil {
			continue
		}
		id, _ := strconv.Atoi(m[1])
		out = append(out, goroutine{id: id, stack: stack})
	}
	return out
}

// waitForLeaks polls for up to waitFor until no goroutine is leaked, and
// returns the stacks of those that still are.
func waitForLeaks(leaked func(goroutine) bool) []string {
	deadline := time.Now().Add(waitFor)
	for {
		var stacks []string
		for _, g := range otherGoroutines() {
			if leaked(g) {
				stacks = append(stacks, g.stack)
			}
		}
		if len(stacks) == 0 || time.Now().After(deadline) {
			return stacks
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// cacherGoroutine is a goroutine running this package's code, other than a
// test blocked in t.Run: the cacher's own goroutines and any a test started.
func cacherGoroutine(g goroutine) bool {
	// The goroutines running the tests themselves (benchmarks run on the
	// main one, under TestMain) are not the cacher's.
	return strings.Contains(g.stack, "github.com/watchkeeper/watchkeeper/cacher.") &&
		!strings.Contains(g.stack, "testing.(*T).Run(") && !strings.Contains(g.stack, "testing.(*B).Run(")
}

func expectNoCacherGoroutines(t testing.TB) {
	t.Helper()
	if leaked := waitForLeaks(cacherGoroutine); len(leaked) > 0 {
		t.Errorf("%d goroutines of the cacher (or of the test) still run:\n\n%s", len(leaked), strings.Join(leaked, "\n\n"))
	}
}

func isPump(g goroutine) bool { return strings.Contains(g.stack, "cacher.(*watcher).pump") }

// pumps counts the watcher pump goroutines running now.
func pumps() int {
	n := 0
	for _, g := range otherGoroutines() {
		if isPump(g) {
			n++
		}
	}
	return n
}

func expectNoWatcherGoroutines(t *testing.T) {
	t.Helper()
	if leaked := waitForLeaks(isPump); len(leaked) > 0 {
		t.Errorf("%d watcher goroutines still run after their watchers ended:\n\n%s", len(leaked), strings.Join(leaked, "\n\n"))
	}
}

// The cacher under test.

var testEpoch = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)

type testCacher struct {
	*Cacher
	fs  *fakeStorage
	clk *testingclock.FakeClock
	// stopHung is set when Stop did not return: the cleanup must not call
	// it again (sync.Once would block on the first call).
	stopHung atomic.Bool
}

// newTestCacher starts a cacher over fs on a fake clock at testEpoch, with
// a 1s granularity and no jitter, and stops it when the test ends. Each test
// (or subtest) owns its cacher: the goroutine check in the cleanup looks at
// every cacher goroutine.
func newTestCacher(t testing.TB, fs *fakeStorage, mutate func(*Config)) *testCacher {
	t.Helper()
	clk := testingclock.NewFakeClock(testEpoch)
	cfg := Config{
		Storage:                   fs,
		GroupResource:             schema.GroupResource{Resource: "pods"},
		ResourcePrefix:            "/pods/",
		KeyFunc:                   testPodKey,
		NewFunc:                   func() kruntime.Object { return &example.Pod{} },
		NewListFunc:               func() kruntime.Object { return &example.PodList{} },
		GetAttrsFunc:              testPodAttrs,
		Clock:                     clk,
		BookmarkFrequency:         time.Minute,
		BookmarkPreDeadlineOffset: 2 * time.Second,
		BookmarkGranularity:       time.Second,
		BookmarkJitter:            0,
		EventsHistoryWindow:       75 * time.Second,
		HistoryCapacity:           100_000,
		WatcherBuffer:             DefaultWatcherBuffer,
		// The fake clock runs far ahead of a fake storage that says
		// nothing: off here; storage_liveness_test.go turns it on.
		StorageSilenceTimeout: 0,
	}
	if mutate != nil {
		mutate(&cfg)
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
	case <-time.After(waitFor):
	}
	t.Errorf("Stop still blocked after %v: %s", waitFor, why)
	if release != nil {
		release()
		select {
		case <-stopped:
			return
		case <-time.After(waitFor):
		}
	}
	tc.stopHung.Store(true)
	t.FailNow()
}

func (tc *testCacher) waitReady(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := tc.WaitReady(ctx); err != nil {
		t.Fatalf("cache not ready: %v", err)
	}
}

// waitRV waits until the cache has applied rv.
func (tc *testCacher) waitRV(t *testing.T, rv uint64) {
	t.Helper()
	poll(t, fmt.Sprintf("the cache to reach RV %d", rv), func() bool { return tc.state.currentRV() >= rv })
}

// cacheTimers is how many timers an idle cache arms on its clock: the
// bookmark tick and the feed checks (feed_checks.go).
const cacheTimers = 2

// waitWaiters waits until exactly n timers wait on the fake clock.
func (tc *testCacher) waitWaiters(t *testing.T, n int) {
	t.Helper()
	poll(t, fmt.Sprintf("%d waiters on the fake clock", n), func() bool { return tc.clk.Waiters() == n })
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

func poll(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitFor, what)
		}
		time.Sleep(time.Millisecond)
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

func everything(bookmarks bool) storage.SelectionPredicate {
	return storage.SelectionPredicate{
		Label: labels.Everything(), Field: fields.Everything(), GetAttrs: testPodAttrs, AllowWatchBookmarks: bookmarks,
	}
}

// webPods selects the pods labelled app=web.
func webPods() storage.SelectionPredicate {
	p := everything(false)
	p.Label = labels.SelectorFromSet(mustParseSet("app=web"))
	return p
}

func mustParseSet(s string) labels.Set {
	set, err := labels.ConvertSelectorToLabelsMap(s)
	if err != nil {
		panic(err)
	}
	return set
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

func nextEvent(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatalf("watch closed, want an event")
		}
		return ev
	case <-time.After(waitFor):
		t.Fatalf("no event within %v", waitFor)
	}
	return watch.Event{}
}

// expectQuiet checks that nothing has been delivered to w. Call it only
// after a point that proves the cacher has acted (stepTicks returns once the
// dispatcher has finished the tick and re-armed its timer; an idle
// watcher's bookmark or event is in its channel by then), so it fails on a
// bookmark the tick should not have sent, however slow the machine, instead
// of passing because a grace period ran out first.
func expectQuiet(t *testing.T, w watch.Interface, when string) {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatalf("%s: watch closed, want it open and quiet", when)
		}
		t.Fatalf("%s: got %s, want nothing", when, describe(ev))
	default:
	}
}

// drainUntilClosed returns what was still queued once the watch closes.
func drainUntilClosed(t *testing.T, w watch.Interface) []watch.Event {
	t.Helper()
	var out []watch.Event
	timeout := time.After(waitFor)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return out
			}
			out = append(out, ev)
		case <-timeout:
			t.Fatalf("watch not closed within %v (drained %d events)", waitFor, len(out))
		}
	}
}

func eventRV(t *testing.T, ev watch.Event) uint64 {
	t.Helper()
	rv, err := storage.APIObjectVersioner{}.ObjectResourceVersion(ev.Object)
	if err != nil {
		t.Fatalf("RV of %s: %v", describe(ev), err)
	}
	return rv
}

func describe(ev watch.Event) string {
	if m, err := meta.Accessor(ev.Object); err == nil {
		return fmt.Sprintf("%s %s@%s labels=%v", ev.Type, m.GetName(), m.GetResourceVersion(), m.GetLabels())
	}
	if s, ok := ev.Object.(*metav1.Status); ok {
		return fmt.Sprintf("%s status %d %s: %s", ev.Type, s.Code, s.Reason, s.Message)
	}
	return fmt.Sprintf("%s %T", ev.Type, ev.Object)
}

func errorStatus(t *testing.T, ev watch.Event) *metav1.Status {
	t.Helper()
	if ev.Type != watch.Error {
		t.Fatalf("got %s, want an Error event", describe(ev))
	}
	s, ok := ev.Object.(*metav1.Status)
	if !ok {
		t.Fatalf("Error event carries %T, want *metav1.Status", ev.Object)
	}
	return s
}

func podName(i int) string { return fmt.Sprintf("pod-%02d", i) }

// receivedAll is what w's channel holds now, described, without waiting.
func receivedAll(w *watcher) []string {
	var got []string
	for {
		select {
		case ev := <-w.ResultChan():
			got = append(got, strings.TrimSuffix(describe(ev), " labels=map[]"))
		default:
			return got
		}
	}
}
