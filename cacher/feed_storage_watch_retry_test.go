package cacher

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/component-base/metrics/testutil"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"
	"github.com/watchkeeper/watchkeeper/cacher/internal/feed"
)

// A storage watch that keeps failing transiently is re-opened from the
// cache's RV, its watchers kept: the cache stays ready until the failures
// have lasted the retry window, then goes not ready and goes on re-opening
// the watch from its RV, never relisting (a partition from etcd that
// outlasts the window must not end every client watch); the first word of
// a re-opened watch makes it ready again, and only a 410 relists. A watch
// that delivers something restarts the window.
func TestStorageWatchRetryWindow(t *testing.T) {
	fs := cachertest.NewFakeStorage(100, cachertest.NewPod("a", 100, nil, ""))
	c := newTestCacher(t, fs, nil)
	c.waitReady(t)
	w := c.startWatch(t, context.Background(), "100", cachertest.Everything(false))
	retriesBefore, _ := testutil.GetCounterMetricValue(c.metrics.StorageWatchRetries)
	noLeader := &apierrors.NewInternalError(fmt.Errorf("etcdserver: no leader")).ErrStatus

	// fail sends the error on watch n and waits for the retry: immediate
	// for the first of a run, otherwise after a backoff on the fake clock.
	fail := func(n int, wantRV string, step time.Duration) {
		t.Helper()
		sw, opts := fs.WaitWatch(t, n)
		if n > 1 && opts.ResourceVersion != wantRV {
			t.Fatalf("storage watch #%d opened at RV %q, want %s", n, opts.ResourceVersion, wantRV)
		}
		sw.SendError(t, noLeader)
		if step > 0 {
			// The tick and the backoff timer.
			c.waitWaiters(t, cacheTimers+1)
			c.clk.Step(step)
		}
	}
	sw, _ := fs.WaitWatch(t, 1)
	sw.Send(t, watch.Modified, cachertest.NewPod("a", 101, map[string]string{"v": "1"}, ""))
	if ev := cachertest.NextEvent(t, w); cachertest.EventRV(t, ev) != 101 {
		t.Fatalf("got %s, want @101", cachertest.Describe(ev))
	}

	// Failures from 0s to 27s: re-opened every time, never relisted. The
	// step covers the longest jittered backoff (2s * 1.5).
	const step = 3 * time.Second
	fail(1, "", 0)
	n := 2
	for elapsed := time.Duration(0); elapsed < feed.StorageWatchRetryWindow; elapsed += step {
		fail(n, "101", step)
		n++
	}
	if got := fs.ListCount(); got != 1 {
		t.Fatalf("GetList called %d times during transient failures, want 1", got)
	}
	if !c.Ready() {
		t.Fatalf("not ready during transient failures")
	}
	if got, _ := testutil.GetCounterMetricValue(c.metrics.StorageWatchRetries); got-retriesBefore != float64(n-1) {
		t.Errorf("storage_watch_retries_total +%v, want +%d", got-retriesBefore, n-1)
	}
	// An event restarts the window: the client watch still gets it.
	sw, _ = fs.WaitWatch(t, n)
	sw.Send(t, watch.Modified, cachertest.NewPod("a", 102, map[string]string{"v": "2"}, ""))
	if ev := cachertest.NextEvent(t, w); cachertest.EventRV(t, ev) != 102 {
		t.Fatalf("after the retries: got %s, want @102", cachertest.Describe(ev))
	}
	sw.SendError(t, noLeader)
	n++
	for elapsed := time.Duration(0); elapsed < feed.StorageWatchRetryWindow; elapsed += step {
		fail(n, "102", step)
		n++
	}
	if got := fs.ListCount(); got != 1 || !c.Ready() {
		t.Fatalf("relisted (%d lists, ready %v) within 30s of the last event", got, c.Ready())
	}

	// Past the window: not ready, the client watch kept, the watch still
	// re-opened from the cache's RV, and no relist however long it lasts.
	for elapsed := time.Duration(0); elapsed < 3*feed.StorageWatchRetryWindow; elapsed += step {
		fail(n, "102", step)
		n++
		if elapsed >= step && c.Ready() {
			t.Fatalf("ready %v after the window ran out, want not ready", elapsed)
		}
	}
	if got := fs.ListCount(); got != 1 {
		t.Fatalf("GetList called %d times past the window, want 1: no relist", got)
	}
	// The watch answers: ready again, and the client watch hears what
	// came meanwhile.
	sw, opts := fs.WaitWatch(t, n)
	if opts.ResourceVersion != "102" {
		t.Fatalf("storage watch #%d opened at RV %q, want 102", n, opts.ResourceVersion)
	}
	sw.Send(t, watch.Modified, cachertest.NewPod("a", 103, map[string]string{"v": "3"}, ""))
	if ev := cachertest.NextEvent(t, w); cachertest.EventRV(t, ev) != 103 {
		t.Fatalf("after the heal: got %s, want @103", cachertest.Describe(ev))
	}
	cachertest.Poll(t, "the cache to be ready again", c.Ready)

	// Only etcd's 410 relists, and ends the client watch.
	fs.SetList(300, cachertest.NewPod("a", 300, nil, ""))
	sw.SendError(t, &apierrors.NewResourceExpired("compacted").ErrStatus)
	cachertest.Poll(t, "the reflector to give up and back off", func() bool { return !c.Ready() && c.clk.Waiters() == cacheTimers+1 })
	cachertest.DrainUntilClosed(t, w)
	c.clk.Step(time.Second)
	if _, opts := fs.WaitWatch(t, n+1); opts.ResourceVersion != "300" {
		t.Errorf("storage watch after the relist at RV %q, want 300", opts.ResourceVersion)
	}
	if got := fs.ListCount(); got != 2 {
		t.Errorf("GetList called %d times, want 2", got)
	}
}
