package cacher

import (
	"k8s.io/apimachinery/pkg/watch"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachemetrics"
	"github.com/watchkeeper/watchkeeper/cacher/internal/hub"
)

// The cache's side of stall and resume (the rules are in
// internal/hub/stall.go): the dispatcher's tooSlow stalls a watcher, and the
// watcher's pump, once its client took what was kept for it, calls
// resumeStalled, which feeds it from the state's history.

// tooSlow is the dispatcher's answer to a watcher that cannot keep up: it
// stalls it, or closes it with stalling off.
func (c *Cacher) tooSlow(w *hub.Watcher) {
	if !c.cfg.StallSlowWatchers {
		c.terminateSlow(w)
		return
	}
	// Out of the hub first: once the watcher is stalled its pump may come
	// back for it at once, and must find it among the stalled.
	if !c.hub.Stall(w) {
		return
	}
	kept, ok := w.Stall(c.clock.Now().UnixNano())
	if !ok {
		return
	}
	c.metrics.SlowWatcher(cachemetrics.SlowStalled)
	c.logger.V(4).Info("Stalled a watcher that cannot keep up: it is fed from the history when its client reads again",
		"key", w.Key, "kept", kept)
}

// resumeStalled is the watchers' feed (hub.WatcherEnv.Feed), in one hold of
// the state's read lock: the history's events after a stalled watcher's
// position that concern it, at most hub.CatchUpChunk of them. When they
// reach the state's RV the watcher is opened again from there and
// registered with the hub in this same hold, as startLocked registers a new
// watcher, so the dispatcher hands it exactly the events after them. When
// the history no longer holds its position it ends with the 410 a watch
// from there would get.
func (c *Cacher) resumeStalled(w *hub.Watcher) {
	if c.relays.has(w) {
		c.feedFromStorage(w)
		return
	}
	c.state.Read(func() { c.resumeLocked(w) })
}

func (c *Cacher) resumeLocked(w *hub.Watcher) {
	if c.relays.has(w) {
		// Handed to etcd since (budget_relay.go): the history it would
		// resume from is gone; its pump comes back for etcd's events.
		return
	}
	pos, ok := w.Position()
	if !ok {
		return // ending, or fed already
	}
	// No resume_single.go rule here: what stalled the watcher was an event
	// of its own after its position, so a watch of one object never finds
	// it unchanged since.
	events, ok := c.state.AfterLocked(pos)
	if !ok {
		c.expireStalledLocked(w, pos)
		return
	}
	limit := hub.CatchUpChunk(c.cfg.WatcherBuffer)
	var (
		chunk      hub.Chunk
		interested int
		through    uint64
	)
	for e := range events {
		sel := w.Selects(e)
		if sel == 0 {
			continue
		}
		if interested == limit {
			w.Refill(chunk, through)
			return
		}
		interested++
		through = e.RV
		objs := c.objectsOf(e, 0) // not dispatched: a catch-up is not timed
		if ev, ok := objs.ForSelection(sel); ok {
			chunk.Add(ev, e.RV)
		}
	}
	if w.Rejoin(chunk, c.state.RVLocked(), c.clock.Now().UnixNano()) && c.hub.Resume(w) {
		c.metrics.SlowWatcher(cachemetrics.SlowResumed)
	}
}

// expireStalledLocked ends a stalled watcher whose position pos the history
// no longer holds with the 410 a watch from pos would get, and says why in
// the log and the metrics. The caller holds the state's read lock.
func (c *Cacher) expireStalledLocked(w *hub.Watcher, pos uint64) {
	// A watcher someone else took out of the hub is ending already (its
	// Stop terminates it, EndWatches drains it): it gets the 410 all the
	// same, or nothing, and its pump does not come back for it.
	if c.hub.Remove(w) {
		c.left(w)
	}
	status := c.tooOldLocked(pos).ErrStatus
	stalledFor, ok := w.Expire(watch.Event{Type: watch.Error, Object: &status}, c.clock.Now().UnixNano())
	if !ok {
		return
	}
	c.metrics.TerminatedWatchers.Inc()
	c.metrics.SlowWatcher(cachemetrics.SlowPositionExpired)
	c.logger.Info("Closing a stalled watcher with 410 Gone: the history no longer holds its position",
		"reason", cachemetrics.SlowPositionExpired, "key", w.Key, "position", pos,
		"resumableFrom", c.state.ResumableFromLocked(), "stalledFor", stalledFor)
}
