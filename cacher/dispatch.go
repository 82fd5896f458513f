package cacher

import (
	"time"

	"k8s.io/klog/v2"

	"github.com/watchkeeper/watchkeeper/bookmarks"
)

// dispatchBudget is how long one event may wait, in total, for watchers
// whose queues are full. A watcher still full after that is closed rather
// than allowed to hold up everyone else.
const dispatchBudget = 100 * time.Millisecond

// dispatcher state lives on its goroutine: nothing here is shared.
type dispatcher struct {
	c *Cacher
	// rv is the RV of the last event or progress handed to watchers. A
	// bookmark carries it: every event at or below it is already queued
	// ahead of the bookmark, so the bookmark never overtakes an event.
	rv         uint64
	due        [][]*watcher
	candidates []*watcher
	matching   []*watcher
	blocked    []*watcher
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

func (d *dispatcher) dispatch(e *event) {
	if e.rv > d.rv {
		d.rv = e.rv
	}
	if e.isProgress() {
		return
	}
	c := d.c
	d.matching = d.matching[:0]
	c.mu.RLock()
	d.candidates = c.watchers.candidates(d.candidates[:0], e)
	c.mu.RUnlock()
	for _, w := range d.candidates {
		// A watcher that started from a state at or after this event already
		// has it; queueing it would only take a slot in its buffer.
		if e.rv > w.startRV && w.interested(e) {
			d.matching = append(d.matching, w)
		}
	}
	clear(d.candidates)

	d.blocked = d.blocked[:0]
	for _, w := range d.matching {
		select {
		case w.input <- e:
		default:
			d.blocked = append(d.blocked, w)
		}
	}
	c.metrics.eventsDispatched.Add(float64(len(d.matching) - len(d.blocked)))
	if len(d.blocked) == 0 {
		return
	}
	timer := c.clock.NewTimer(dispatchBudget)
	defer timer.Stop()
	budgetLeft := true
	for _, w := range d.blocked {
		if budgetLeft {
			select {
			case w.input <- e:
				c.metrics.eventsDispatched.Inc()
				continue
			case <-w.done:
				continue
			case <-timer.C():
				budgetLeft = false
			}
		}
		// Once the budget is spent, a watcher still gets one last try without
		// waiting: it may have made room while others were waited for.
		select {
		case w.input <- e:
			c.metrics.eventsDispatched.Inc()
		case <-w.done:
		default:
			c.terminateSlow(w)
		}
	}
}

// tick sends the due watchers their bookmark and files them again, and ages
// the history out. With nothing due it touches no watcher.
func (d *dispatcher) tick() {
	c := d.c
	start := c.clock.Now()
	c.mu.Lock()
	c.expireHistoryLocked(start)
	d.due = c.calendar.PopDue(d.due[:0])
	c.mu.Unlock()
	if len(d.due) == 0 {
		c.metrics.tickDuration.Observe(c.clock.Since(start).Seconds())
		return
	}

	b := progress(d.rv)
	sent, count := 0, 0
	// A watcher closed since it was filed is skipped. Only this goroutine
	// closes a watcher's input (gracefully), so a watcher still in the set
	// has an open input; offering never blocks, so holding the read lock is
	// cheap.
	c.mu.RLock()
	for _, slot := range d.due {
		for _, w := range slot {
			count++
			if c.watchers.has(w) && w.offerBookmark(b) {
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
				c.fileLocked(w, now)
			}
		}
	}
	c.mu.Unlock()
	clear(d.due)
	c.metrics.bookmarksSent.Add(float64(sent))
	c.metrics.watchersDue.Observe(float64(count))
	c.metrics.tickDuration.Observe(c.clock.Since(start).Seconds())
	if sent < count {
		klog.V(6).InfoS("Bookmark tick", "resource", c.groupResource.String(), "due", count, "sent", sent, "rv", d.rv)
	}
}
