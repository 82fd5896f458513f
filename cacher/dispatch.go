package cacher

import (
	"time"

	"github.com/watchkeeper/watchkeeper/bookmarks"
)

// dispatcher state lives on its goroutine: nothing here is shared.
type dispatcher struct {
	c *Cacher
	// rv is the RV of the last event or progress handed to watchers. A
	// bookmark carries it: every event at or below it is already queued
	// ahead of the bookmark, so the bookmark never overtakes an event.
	rv         uint64
	due        [][]*watcher
	candidates []*watcher
}

// dispatchLoop is the dispatcher goroutine: events in order, and the
// bookmark tick.
func (c *Cacher) dispatchLoop() {
	defer c.wg.Done()
	d := &dispatcher{c: c}
	tick := bookmarks.NewTick(c.clock, c.cfg.BookmarkGranularity, c.cfg.BookmarkJitter)
	defer tick.Stop()
	for {
		select {
		case <-c.stopCh:
			return
		case e := <-c.incoming:
			d.dispatch(e)
		case <-tick.C():
			d.tick()
			tick.Rearm()
		}
	}
}

// dispatch hands e to every interested watcher. It never waits for a
// client: a busy one has the event queued, a stalled one is closed.
func (d *dispatcher) dispatch(e *event) {
	if e.rv > d.rv {
		d.rv = e.rv
	}
	if e.isProgress() {
		return
	}
	c := d.c
	c.mu.RLock()
	d.candidates = c.watchers.candidates(d.candidates[:0], e)
	c.mu.RUnlock()
	objs := c.objectsOf(e)
	now := c.clock.Now().UnixNano()
	delivered := 0
	for _, w := range d.candidates {
		// A watcher that started from a state at or after this event already
		// has it.
		if e.rv <= w.startRV || !w.interested(e) {
			continue
		}
		out, ok := objs.forWatcher(w)
		if !ok {
			continue
		}
		if !w.deliver(out, now) {
			c.terminateSlow(w)
			continue
		}
		delivered++
	}
	clear(d.candidates)
	c.metrics.eventsDispatched.Add(float64(delivered))
}

// tick sends the due watchers their bookmark and files them again, and
// drops the history etcd compacted. With nothing due it touches no watcher.
func (d *dispatcher) tick() {
	c := d.c
	start := c.clock.Now()
	c.checkStorageLiveness(start)
	c.mu.Lock()
	c.trimHistoryLocked()
	// Before the pop: the watchers due now are filed again after this
	// tick, and those are the ones the next tick serves.
	c.freshenBookmarksLocked(start)
	d.due = c.calendar.PopDue(d.due[:0])
	c.mu.Unlock()
	if len(d.due) == 0 {
		c.observeTick(start)
		return
	}

	// One bookmark object for every watcher due, encoded once per encoder.
	var shared *sharedObject
	sharedBookmark := func() *sharedObject {
		if shared == nil {
			obj, err := c.bookmarkObject(d.rv)
			if err == nil {
				shared, err = share(obj)
			}
			if err != nil {
				// Each watcher then builds its own, and reports it failing.
				c.logger.V(2).Info("Could not build the tick's shared bookmark", "resourceVersion", d.rv, "err", err)
			}
		}
		return shared
	}
	sent, count := 0, 0
	nowNanos := c.clock.Now().UnixNano()
	// A watcher closed since it was filed is skipped. Offering never waits,
	// so holding the read lock is cheap.
	c.mu.RLock()
	for _, slot := range d.due {
		for _, w := range slot {
			count++
			if c.watchers.has(w) && w.offerBookmark(d.rv, sharedBookmark, nowNanos) {
				sent++
			}
		}
	}
	c.mu.RUnlock()
	now := c.clock.Now()
	c.mu.Lock()
	for _, slot := range d.due {
		for _, w := range slot {
			if c.watchers.has(w) {
				c.refileLocked(w, now)
			}
		}
	}
	c.mu.Unlock()
	clear(d.due)
	c.metrics.bookmarksSent.Add(float64(sent))
	c.metrics.watchersDue.Observe(float64(count))
	c.observeTick(start)
	if sent < count {
		c.logger.V(6).Info("Bookmark tick", "due", count, "sent", sent, "rv", d.rv)
	}
}

func (c *Cacher) observeTick(start time.Time) {
	took := c.clock.Since(start)
	c.lastTickNanos.Store(int64(took))
	c.metrics.tickDuration.Observe(took.Seconds())
}
