package httpbench

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/v1alpha1"
	clientset "github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/generated/clientset/versioned"
)

const (
	// bookmarkPreDeadlineOffset is how long before a watch's deadline both
	// caches send it a bookmark at their defaults: upstream hardcodes 2s,
	// watchkeeper's --watch-cache-bookmark-pre-deadline-offset defaults to
	// it. The sample apiserver runs with default watch cache options.
	bookmarkPreDeadlineOffset = 2 * time.Second
	// bookmarkSettle lets the server settle after the watches are open,
	// before the CPU clock starts: the storage level's settleTime.
	bookmarkSettle = 2 * time.Second
	// bookmarkQuietLead ends the quiet part of the window this long before
	// the first bookmark is due: both caches file a watcher in the
	// one-second slot its bookmark time falls in and send on a tick, so
	// either may send up to a second early.
	bookmarkQuietLead = 1500 * time.Millisecond
	// bookmarkDeadlineMargin ends the window this long before the last
	// watch's deadline, as at the storage level.
	bookmarkDeadlineMargin = 300 * time.Millisecond
	clockTick              = time.Second
)

// bookmarkTimeout is the timeoutSeconds that makes a watch due its
// pre-deadline bookmark period after it starts: period plus the offset,
// rounded up to the whole second timeoutSeconds carries. The second result
// is the period that timeout really gives (period itself when that is whole
// seconds).
func bookmarkTimeout(period time.Duration) (timeout, due time.Duration) {
	timeout = (period + bookmarkPreDeadlineOffset + time.Second - 1).Truncate(time.Second)
	return timeout, timeout - bookmarkPreDeadlineOffset
}

// Bookmarks opens watchers idle, bookmark-enabled watches on widgets, all
// of which the server owes one bookmark at the same time, period after the
// first opened, and reports what delivering them cost the server in CPU: the
// storage level's bookmarks scenario over HTTP.
//
// The apiserver's periodic bookmark is a fixed 1m, so a shorter period is
// had through the watch deadline, as at the storage level. The handler
// gives the storage watch a context deadline of its own start +
// timeoutSeconds (k8s.io/apiserver endpoints/handlers/get.go, handleWatch; a
// watch is a long-running request, so no request deadline comes before it),
// and both caches send a watch a bookmark 2s before its deadline when that
// comes before the periodic one. The first watch asks for timeoutSeconds =
// period + 2s (bookmarkTimeout), and each later one for the whole seconds
// left to that same deadline, rounded up, sent only when that lands its
// deadline less than deadlineSpread after it (watchSpec.sendAt): every
// bookmark falls due within 250ms, in one or two of the caches' one-second
// slots, popped by ticks of up to 1.25s well before the first deadline,
// however long opening takes. (With whole seconds alone the due times
// spread over a second, and a tick late in it came past the first deadline
// for one cache or the other; before that, one timeout for all made 10k
// watches, which take longer than the 2s offset to open, reach their
// deadlines inside the window.) With period at most the 1m frequency that
// is the one bookmark each watch is due (at exactly 1m the two coincide),
// by the same rule in both caches at default options.
//
// CPU is measured over the storage level's window: from the end of opening
// plus a 2s settle until every watch has its bookmark, or until 300ms before
// the first deadline, so no watch is ended on its deadline inside it. The
// part before the first bookmark can fall due (period - 1.5s after the first
// watch opened, as both caches may send up to a second early) is also
// reported alone, as the baseline. A run whose opening leaves no such quiet
// stretch fails. Opening is paced (watchSpec.sendAt): its time is the idle
// scenario's figure, not this one's.
//
// Both caches file bookmark times in one-second slots, may send one up to a
// slot early, and then, the pre-deadline time not having passed, send
// another a slot later if the resourceVersion moved. The window ends when
// every watch has its first, so that second one stays out of it unless the
// due times straddle two slots, when the early watches' second bookmark may
// go out with the late ones' first; the figures say so:
// watchers_with_extra_bookmarks and watchers_at_deadline (watches the server
// ended on their deadline, which watchers_closed leaves out) appear only
// when not zero.
//
// Meanwhile a writer updates a gadget every second: it moves etcd's
// revision without touching widgets, and with etcd's progress
// notifications the widgets cache's resourceVersion. Upstream sends no
// bookmark while that stands still at the watch's start, and that is not
// what is measured here.
//
// Bookmarks are counted per watch: bookmarks_delivered is their sum by the
// end of the window, and watchers_without_bookmark appears when some watch
// got none by then. cpu_seconds_per_1k_bookmarks divides the window's CPU by
// the bookmarks that came inside it. The server's CPU is read from /proc in
// 10ms ticks; server_gc_cycles_in_window is how many GC cycles it ran in
// the window (its /metrics), which at 10k watches is much of the CPU.
func Bookmarks(ctx context.Context, env Env, decorator string, watchers int, period time.Duration) ([]result.Result, error) {
	if watchers <= 0 || period <= 0 {
		return nil, fmt.Errorf("bookmarks: watchers = %d, period = %v, want both > 0", watchers, period)
	}
	timeout, due := bookmarkTimeout(period)
	rec := result.NewRecorder("bookmarks", Level, decorator, map[string]int{"watchers": watchers, "period_seconds": int(period / time.Second)})
	err := withServer(ctx, env, "bookmarks", decorator, func(s *serverProcess) error {
		cs, err := s.typedClient()
		if err != nil {
			return err
		}
		clock, err := cs.DemoV1alpha1().Gadgets().Create(ctx, &v1alpha1.Gadget{
			ObjectMeta: metav1.ObjectMeta{Name: "bench-clock"},
			Spec:       v1alpha1.GadgetSpec{Owner: "bench"},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating the clock gadget: %w", err)
		}
		// The revision moves from before the watches open until the end.
		wctx, stopWriter := context.WithCancel(ctx)
		var writer sync.WaitGroup
		var writerErr error
		writer.Go(func() { writerErr = tickGadget(wctx, cs, clock) })
		defer func() {
			stopWriter()
			writer.Wait()
		}()

		rv, err := currentWidgetsRV(ctx, cs)
		if err != nil {
			return err
		}
		t0 := time.Now()
		// Just under a whole number of seconds from now, so the first
		// deadlineSpread of opening sends at once (a short run's every
		// watch) and later watches wait for the next second's start.
		deadline := t0.Add(timeout - time.Millisecond)
		ws, err := openWatches(ctx, s, watchSpec{path: widgetsPath, resourceVersion: rv, deadline: deadline}, watchers, nil)
		if err != nil {
			return err
		}
		defer ws.stop()
		opened := time.Now()
		quietEnd := t0.Add(due - bookmarkQuietLead)
		windowEnd := deadline.Add(-bookmarkDeadlineMargin)
		if opened.Add(bookmarkSettle).After(quietEnd.Add(-time.Second)) {
			return fmt.Errorf("opening %d watches took %v: no idle time left in a %v period",
				watchers, opened.Sub(t0).Round(time.Millisecond), due)
		}
		if err := sleepCtx(ctx, bookmarkSettle); err != nil {
			return err
		}

		b0 := ws.bookmarks.Load()
		gc0, err := s.gcCycles(ctx)
		if err != nil {
			return err
		}
		cpu0, err := s.CPUSeconds()
		if err != nil {
			return err
		}
		start := time.Now()
		if err := sleepCtx(ctx, time.Until(quietEnd)); err != nil {
			return err
		}
		cpuQuiet, err := s.CPUSeconds()
		if err != nil {
			return err
		}
		quietWall := time.Since(start)
		select {
		case <-ws.allBookmarked:
		case <-time.After(time.Until(windowEnd)):
		case <-ctx.Done():
			return ctx.Err()
		}
		cpu1, err := s.CPUSeconds()
		if err != nil {
			return err
		}
		wall := time.Since(start)
		b1 := ws.bookmarks.Load()
		gc1, err := s.gcCycles(ctx)
		if err != nil {
			return err
		}
		without, extra := ws.bookmarkCounts()
		closed, atDeadline := ws.closed.Load(), ws.expired.Load()
		stopWriter()
		writer.Wait()
		if writerErr != nil {
			return writerErr
		}
		ws.stop()
		s.noteCloses(ws)

		cpu := cpu1 - cpu0
		rec.Add("bookmarks_delivered", float64(b1), "bookmarks", result.Higher)
		if without > 0 {
			rec.Add("watchers_without_bookmark", float64(without), "watchers", result.Lower)
		}
		if extra > 0 {
			rec.Add("watchers_with_extra_bookmarks", float64(extra), "watchers", result.Lower)
		}
		rec.Add("cpu_seconds_per_1k_bookmarks", cpu/(float64(b1-b0)/1000), "s", result.Lower)
		rec.Add("cpu_seconds_per_second", cpu/wall.Seconds(), "s/s", result.Lower)
		rec.Add("cpu_seconds_per_second_before_bookmarks", (cpuQuiet-cpu0)/quietWall.Seconds(), "s/s", result.Lower)
		rec.Add("server_gc_cycles_in_window", gc1-gc0, "cycles", result.Lower)
		rec.Add("watchers_closed", float64(closed), "watchers", result.Lower)
		if atDeadline > 0 {
			rec.Add("watchers_at_deadline", float64(atDeadline), "watchers", result.Lower)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return rec.Results(), nil
}

// tickGadget updates g every clockTick until ctx ends. Each update is a
// new etcd revision.
func tickGadget(ctx context.Context, cs clientset.Interface, g *v1alpha1.Gadget) error {
	t := time.NewTicker(clockTick)
	defer t.Stop()
	for n := int32(1); ; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		g = g.DeepCopy()
		// A change, or the apiserver skips the write as a no-op.
		replicas := n
		g.Spec.Replicas = &replicas
		next, err := cs.DemoV1alpha1().Gadgets().Update(ctx, g, metav1.UpdateOptions{})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("updating the clock gadget: %w", err)
		}
		g = next
	}
}
