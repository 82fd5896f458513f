package cacher

import (
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/watchkeeper/watchkeeper/bookmarks"
	"github.com/watchkeeper/watchkeeper/cacher/internal/hub"
	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
)

func (c *Cacher) newDispatcher() *hub.Dispatcher {
	return &hub.Dispatcher{Env: hub.DispatchEnv{
		Clock: c.clock,
		Candidates: func(dst []*hub.Watcher, e *objects.Event) []*hub.Watcher {
			dst, filtered := c.hub.Candidates(dst, e)
			if filtered > 0 {
				c.metrics.ShardFiltered.Add(float64(filtered))
			}
			return dst
		},
		Objects:    c.objectsOf,
		TooSlow:    c.terminateSlow,
		Dispatched: c.metrics.EventsDispatched.Inc,
		Latency:    c.fan.watcherEnv.Latency,
	}}
}

// dispatchLoop is the dispatcher goroutine: events in order, and the
// bookmark tick.
func (c *Cacher) dispatchLoop() {
	defer c.wg.Done()
	d := c.newDispatcher()
	batch := make([]*objects.Event, 0, hub.DispatchBatch)
	tick := bookmarks.NewTick(c.clock, c.cfg.BookmarkGranularity, c.cfg.BookmarkJitter)
	defer tick.Stop()
	// Shutdown bookmarks waiting for the dispatcher to reach their RV: one
	// per BookmarkAll call in flight.
	var waiting []bookmarkAllRequest
	for {
		select {
		case <-c.stopCh:
			return
		case e := <-c.incoming:
			batch = append(batch[:0], e)
		more:
			for len(batch) < hub.DispatchBatch {
				select {
				case e := <-c.incoming:
					batch = append(batch, e)
				default:
					break more
				}
			}
			d.Dispatch(batch...)
			clear(batch)
			waiting = c.answerBookmarkAll(waiting, d.RV)
		case <-tick.C():
			d.Due = c.tick(d.RV, d.Due)
			tick.Rearm()
		case req := <-c.fan.bookmarkAll:
			waiting = c.answerBookmarkAll(append(waiting, req), d.RV)
		}
	}
}

// tick sends the watchers due a bookmark at rv (the dispatcher's: every
// event at or below it is queued ahead) and files them again; that is all
// it does (the feed's checks have their own timer, feed_checks.go). With
// nothing due it touches no watcher. due is the dispatcher's scratch
// slice, returned for reuse.
func (c *Cacher) tick(rv uint64, due [][]*hub.Watcher) [][]*hub.Watcher {
	start := c.clock.Now()
	// Before the pop: the watchers due now are filed again after this
	// tick, and those are the ones the next tick serves.
	c.freshenBookmarks(start)
	due = c.hub.PopDue(due[:0])
	if len(due) == 0 {
		c.observeTick(start)
		return due
	}

	sharedBookmark := c.sharedBookmark(rv)
	nowNanos := c.clock.Now().UnixNano()
	// A watcher closed since it was filed is skipped.
	sent, count := c.hub.Offer(due, func(w *hub.Watcher) bool {
		return w.OfferBookmark(rv, sharedBookmark, nowNanos, false)
	})
	c.hub.Refile(due, c.clock.Now())
	clear(due)
	c.metrics.BookmarksSent.Add(float64(sent))
	c.metrics.WatchersDue.Observe(float64(count))
	c.observeTick(start)
	if sent < count {
		c.logger.V(6).Info("Bookmark tick", "due", count, "sent", sent, "rv", rv)
	}
	return due
}

// sharedBookmark builds, when first called, one bookmark object at rv for
// every watcher offered one, encoded once per encoder.
func (c *Cacher) sharedBookmark(rv uint64) func() *objects.SharedObject {
	var shared *objects.SharedObject
	return func() *objects.SharedObject {
		if shared == nil {
			obj, err := c.bookmarkObject(rv)
			if err == nil {
				shared, err = objects.Share(obj)
			}
			if err != nil {
				// Each watcher then builds its own, and reports it failing.
				c.logger.V(2).Info("Could not build a shared bookmark", "resourceVersion", rv, "err", err)
			}
		}
		return shared
	}
}

func (c *Cacher) observeTick(start time.Time) {
	took := c.clock.Since(start)
	c.fan.lastTickNanos.Store(int64(took))
	c.metrics.TickDuration.Observe(took.Seconds())
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
