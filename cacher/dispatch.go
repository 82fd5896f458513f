package cacher

import (
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/watchkeeper/watchkeeper/bookmarks"
	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
)

// dispatcher fans events out to the watchers; its state lives on the
// cache's dispatch goroutine, and it is given what it needs of the cache
// (dispatchEnv), so it can be tested alone.
type dispatcher struct {
	env dispatchEnv
	// rv is the RV of the last event or progress handed to watchers. A
	// bookmark carries it: every event at or below it is already queued
	// ahead of the bookmark, so the bookmark never overtakes an event.
	rv         uint64
	due        [][]*watcher
	candidates []*watcher

	// The batch being dispatched: its events' objects, the watchers that
	// get any of them in the order first met, and for each, what it
	// selects of each event (touched[i] gets objs[j] unless sels[i][j] is
	// 0).
	objs [dispatchBatch]eventObjects
	// atOnce counts, per event of the batch, the deliveries a client's
	// channel took straight from the dispatcher (dispatch_latency.go).
	atOnce  [dispatchBatch]uint32
	touched []*watcher
	sels    []batchSelections
}

// batchSelections is what one watcher selects of each event of a batch.
type batchSelections [dispatchBatch]selection

// dispatchBatch is how many pending events the dispatcher hands out
// together. Each watcher then gets its share of the batch in one go: a
// client goroutine woken by the first event finds the rest in its channel
// instead of being woken once per event, which is most of the CPU of a
// fan-out to thousands of watchers (runtime.chansend waking a parked
// receiver). Only events already waiting are batched, so an idle cache
// adds no latency. At most 8 (a byte of mask bits), and below the
// channel's resultBuffer so a batch fits a reader that keeps up.
const dispatchBatch = 8

// dispatchSeq numbers the events dispatched by every dispatcher of the
// process, so a match class's memo is never taken for another event's, even
// one a second dispatcher of the same cache numbered (benchmarks run one).
var dispatchSeq atomic.Uint64

// dispatchEnv is what the dispatcher needs of its cache.
type dispatchEnv struct {
	clock clock.PassiveClock
	// candidates appends to dst the watchers that may want e (by trigger);
	// it takes the cache's read lock.
	candidates func(dst []*watcher, e *objects.Event) []*watcher
	// objects builds what each watcher is sent of e, once per event, which
	// the dispatcher took at dispatchedNanos.
	objects func(e *objects.Event, dispatchedNanos int64) eventObjects
	// tooSlow closes a watcher that cannot keep up.
	tooSlow func(w *watcher)
	// dispatched counts an event dispatched, once whatever the watchers.
	dispatched func()
	// latency observes the deliveries clients took at once (nil: not).
	latency *dispatchLatency
}

func (c *Cacher) newDispatcher() *dispatcher {
	return &dispatcher{env: dispatchEnv{
		clock: c.clock,
		candidates: func(dst []*watcher, e *objects.Event) []*watcher {
			dst, filtered := c.hub.candidates(dst, e)
			if filtered > 0 {
				c.metrics.ShardFiltered.Add(float64(filtered))
			}
			return dst
		},
		objects:    c.objectsOf,
		tooSlow:    c.terminateSlow,
		dispatched: c.metrics.EventsDispatched.Inc,
		latency:    c.fan.watcherEnv.latency,
	}}
}

// dispatchLoop is the dispatcher goroutine: events in order, and the
// bookmark tick.
func (c *Cacher) dispatchLoop() {
	defer c.wg.Done()
	d := c.newDispatcher()
	batch := make([]*objects.Event, 0, dispatchBatch)
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
			for len(batch) < dispatchBatch {
				select {
				case e := <-c.incoming:
					batch = append(batch, e)
				default:
					break more
				}
			}
			d.dispatch(batch...)
			clear(batch)
			waiting = c.answerBookmarkAll(waiting, d.rv)
		case <-tick.C():
			d.due = c.tick(d.rv, d.due)
			tick.Rearm()
		case req := <-c.fan.bookmarkAll:
			waiting = c.answerBookmarkAll(append(waiting, req), d.rv)
		}
	}
}

// dispatch hands events, in order and at most dispatchBatch of them, to
// every interested watcher: each watcher gets its share at once, in order.
// It never waits for a client: a busy one has the events queued, a stalled
// one is closed.
func (d *dispatcher) dispatch(events ...*objects.Event) {
	start := d.env.clock.Now().UnixNano()
	for j, e := range events {
		if e.RV > d.rv {
			d.rv = e.RV
		}
		if e.IsProgress() {
			continue
		}
		// Once per event, however many watchers get it, and never for a
		// progress notification: what upstream's
		// apiserver_watch_cache_events_dispatched_total counts since 1.38.
		d.env.dispatched()
		d.candidates = d.env.candidates(d.candidates[:0], e)
		d.objs[j] = d.env.objects(e, start)
		// The event's number, for the match classes' memo.
		seq := dispatchSeq.Add(1)
		for _, w := range d.candidates {
			// A watcher that started from a state at or after this event
			// already has it.
			if e.RV <= w.startRV {
				continue
			}
			sel := selectionFor(w, e, seq)
			if sel == 0 {
				continue
			}
			// A slot left from an earlier batch points past touched or
			// at another watcher.
			if slot := int(w.batchSlot); slot >= len(d.touched) || d.touched[slot] != w {
				w.batchSlot = int32(len(d.touched))
				d.touched = append(d.touched, w)
				d.sels = append(d.sels, batchSelections{})
			}
			d.sels[w.batchSlot][j] = sel
		}
		clear(d.candidates)
	}
	now := d.env.clock.Now().UnixNano()
	for i, w := range d.touched {
		if !w.deliverBatch(&d.sels[i], &d.objs, &d.atOnce, now) {
			d.env.tooSlow(w)
		}
	}
	for j, n := range d.atOnce[:len(events)] {
		if n > 0 {
			d.env.latency.sentAtOnce(d.objs[j].times(), n, now)
		}
	}
	clear(d.atOnce[:len(events)])
	clear(d.touched)
	clear(d.objs[:len(events)])
	d.touched, d.sels = d.touched[:0], d.sels[:0]
}

// tick sends the watchers due a bookmark at rv (the dispatcher's: every
// event at or below it is queued ahead) and files them again; that is all
// it does (the feed's checks have their own timer, feed_checks.go). With
// nothing due it touches no watcher. due is the dispatcher's scratch
// slice, returned for reuse.
func (c *Cacher) tick(rv uint64, due [][]*watcher) [][]*watcher {
	start := c.clock.Now()
	// Before the pop: the watchers due now are filed again after this
	// tick, and those are the ones the next tick serves.
	c.freshenBookmarks(start)
	due = c.hub.popDue(due[:0])
	if len(due) == 0 {
		c.observeTick(start)
		return due
	}

	sharedBookmark := c.sharedBookmark(rv)
	nowNanos := c.clock.Now().UnixNano()
	// A watcher closed since it was filed is skipped.
	sent, count := c.hub.offer(due, func(w *watcher) bool {
		return w.offerBookmark(rv, sharedBookmark, nowNanos, false)
	})
	c.hub.refile(due, c.clock.Now())
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
