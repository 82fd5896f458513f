package cacher

import (
	"testing"
	"time"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"
)

// The feed's checks keep their own period, whatever the bookmark
// settings: with bookmarks ticking every 10s, a storage watch silent for a
// third of its 3s timeout is asked for progress within a few seconds, not
// at the next bookmark tick.
func TestFeedChecksDoNotWaitForTheBookmarkTick(t *testing.T) {
	fs := cachertest.NewFakeStorage(100, cachertest.NewPod("a", 100, nil, ""))
	c := newTestCacher(t, fs, func(cfg *Config) {
		cfg.BookmarkGranularity = 10 * time.Second
		cfg.StorageSilenceTimeout = 3 * time.Second
	})
	c.waitReady(t)
	fs.WaitWatch(t, 1)
	c.waitWaiters(t, cacheTimers)
	for step := 1; ; step++ {
		c.clk.Step(time.Second)
		cachertest.Poll(t, "the feed checks to run", func() bool { return fs.ProgressCount() > 0 || c.clk.Waiters() == cacheTimers })
		if fs.ProgressCount() > 0 {
			break
		}
		if step == 3 {
			t.Fatalf("no progress request after %ds of silence (timeout 3s, bookmark granularity 10s)", step)
		}
	}
}
