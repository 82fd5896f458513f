package cacher

import (
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/watchkeeper/watchkeeper/cacher/internal/hub"
	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
)

// newLoop is the hub's loop, the dispatcher goroutine, given what it needs
// of the cache: what each watcher is sent of an event, the stall (or close)
// of a watcher that cannot keep up, bookmark objects, and the
// fresh-bookmark probe before each tick.
func (c *Cacher) newLoop() *hub.Loop {
	return hub.NewLoop(c.hub, hub.LoopEnv{
		Clock: c.clock, Granularity: c.cfg.BookmarkGranularity, Jitter: c.cfg.BookmarkJitter,
		Stop: c.life.stopCh, WG: &c.life.wg, Metrics: c.metrics, Logger: c.logger,
		Objects: c.objectsOf, TooSlow: c.tooSlow, Bookmark: c.bookmarkObject, BeforeTick: c.freshenBookmarks,
		Latency: c.watcherEnv.Latency,
	}, incomingBuffer)
}

func (c *Cacher) objectsOf(e *objects.Event, dispatchedNanos int64) hub.EventObjects {
	return hub.EventObjects{Event: e, Versioner: c.cfg.Versioner, Dropped: c.dropped, DispatchedNanos: dispatchedNanos}
}

// bookmarkObject is an empty object of the resource's type at rv, as a
// bookmark carries.
func (c *Cacher) bookmarkObject(rv uint64) (runtime.Object, error) {
	obj := c.cfg.NewFunc()
	if err := c.cfg.Versioner.UpdateObject(obj, rv); err != nil {
		return nil, err
	}
	return obj, nil
}

// freshenBookmarks runs on every tick: when bookmarks come due by the next
// tick (at most two granularities away, jitter included) and the cache will
// by then have heard nothing from etcd for BookmarkMaxStaleness, it asks etcd
// for progress now, once for the resource, so those bookmarks carry an RV
// etcd confirmed within the bound.
func (c *Cacher) freshenBookmarks(now time.Time) {
	bound := c.cfg.BookmarkMaxStaleness
	silent, ok := c.feed.Silence(now, bound)
	ahead := 2 * c.cfg.BookmarkGranularity
	if !ok || silent+ahead < bound {
		return
	}
	if c.hub.HasDueBy(now.Add(ahead)) {
		c.metrics.FreshnessProbes.Inc()
		c.feed.RequestProgress()
	}
}
