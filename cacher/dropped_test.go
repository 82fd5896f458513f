package cacher

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/component-base/metrics/testutil"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachemetrics"
	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"
)

// A bookmark the cache cannot build (here the resource's empty object has no
// metadata to carry an RV) is not dropped silently: it is counted in
// watchkeeper_watch_cache_dropped_total{what="bookmark"} and logged.
func TestDroppedBookmarkIsCounted(t *testing.T) {
	fs := cachertest.NewFakeStorage(100, cachertest.NewPod("a", 100, nil, ""))
	c := newTestCacher(t, fs, func(cfg *Config) {
		cfg.BookmarkFrequency = 10 * time.Second
		cfg.NewFunc = func() kruntime.Object { return &metav1.Status{} }
	})
	c.waitReady(t)
	fs.WaitWatch(t, 1)
	before, _ := testutil.GetCounterMetricValue(c.metrics.Dropped[cachemetrics.DropBookmark])
	w := c.startWatch(t, context.Background(), "100", cachertest.Everything(true))
	c.stepTicks(t, 11, nil)
	cachertest.ExpectQuiet(t, w, "after a bookmark that could not be built")
	after, _ := testutil.GetCounterMetricValue(c.metrics.Dropped[cachemetrics.DropBookmark])
	if after-before < 1 {
		t.Errorf("dropped_total{what=bookmark} +%v after the bookmark came due, want at least +1", after-before)
	}
}
