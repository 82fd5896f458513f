package storagebench

import (
	"context"
	"fmt"
	"time"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
)

const (
	// preDeadlineOffset is both caches' default pre-deadline bookmark offset
	// (upstream hardcodes it, watchkeeper defaults to it).
	preDeadlineOffset = 2 * time.Second
	// settleTime lets the watches' goroutines and the caches' schedules
	// settle after opening, before the CPU clock starts.
	settleTime = 2 * time.Second
	// rvMoveInterval is how often the unrelated key is written.
	rvMoveInterval = time.Second
)

// Bookmarks holds n idle watches open for one bookmark period while the
// resourceVersion moves, and reports what delivering one bookmark to each
// costs in process CPU.
//
// Upstream's bookmark period is a constant (1m), so a shorter period can only
// be had through the watch deadline: both caches send a bookmark
// preDeadlineOffset before a watch's deadline when that comes before the
// periodic one. Every watch gets the deadline start+period+offset, so each is
// due exactly one bookmark, at start+period, by the same rule in both caches
// and with both at their default options. The window ends when every watch
// has its bookmark, or just before the deadlines would end the watches.
func Bookmarks(ctx context.Context, env Env, decorator string, n int, period time.Duration) ([]result.Result, error) {
	rec := result.NewRecorder("bookmarks", Level, decorator, map[string]int{"watchers": n, "period_seconds": int(period / time.Second)})
	s, destroy, err := openStorage(ctx, env, decorator)
	if err != nil {
		return nil, err
	}
	defer destroy()
	mover, err := startRVMover(env, rvMoveInterval)
	if err != nil {
		return nil, err
	}
	defer mover.stop()
	opts, err := fleetOptions(ctx, s)
	if err != nil {
		return nil, err
	}

	base := time.Now()
	due := base.Add(period)
	deadline := due.Add(preDeadlineOffset)
	watchCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	// Opening counts from base, where the watches' deadlines were set.
	f, _, err := openFleet(watchCtx, s, n, opts, nil)
	openTime := time.Since(base)
	if err != nil {
		return nil, err
	}
	defer f.stop()
	// Before the bookmarks fall due there must be a quiet stretch to measure.
	quietEnd := due.Add(-1500 * time.Millisecond)
	if time.Now().Add(settleTime).After(quietEnd.Add(-time.Second)) {
		return nil, fmt.Errorf("opening %d watches took %v: no idle time left in a %v period", n, openTime.Round(time.Millisecond), period)
	}
	opened := time.Now()
	waitGoroutinesSettle(500*time.Millisecond, settleTime)
	time.Sleep(time.Until(opened.Add(settleTime)))
	f.bookmarks.Store(0)

	start, cpuStart := time.Now(), cpuSeconds()
	time.Sleep(time.Until(quietEnd))
	quietWall, quietCPU := time.Since(start), cpuSeconds()-cpuStart
	windowEnd := deadline.Add(-300 * time.Millisecond)
	select {
	case <-f.allBookmarked:
	case <-time.After(time.Until(windowEnd)):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	wall, cpu := time.Since(start), cpuSeconds()-cpuStart
	delivered := f.bookmarks.Load()
	closed := f.closed.Load()
	f.report()

	rec.Add("bookmarks_delivered", float64(delivered), "bookmarks", result.Higher)
	if delivered > 0 {
		rec.Add("cpu_seconds_per_1000_bookmarks", cpu/float64(delivered)*1000, "s", result.Lower)
	}
	rec.Add("cpu_seconds_per_second", cpu/wall.Seconds(), "s/s", result.Lower)
	rec.Add("cpu_seconds_per_second_before_bookmarks", quietCPU/quietWall.Seconds(), "s/s", result.Lower)
	rec.Add("window_seconds", wall.Seconds(), "s", "")
	rec.Add("open_seconds", openTime.Seconds(), "s", result.Lower)
	rec.Add("watchers_closed", float64(closed), "watchers", result.Lower)
	return rec.Results(), nil
}
