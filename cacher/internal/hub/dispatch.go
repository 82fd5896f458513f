package hub

import (
	"sync/atomic"

	"k8s.io/utils/clock"

	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
)

// Dispatcher fans events out to the watchers; its state lives on the
// cache's dispatch goroutine, and it is given what it needs of the cache
// (DispatchEnv), so it can be tested alone.
type Dispatcher struct {
	Env DispatchEnv
	// RV is the RV of the last event or progress handed to watchers. A
	// bookmark carries it: every event at or below it is already queued
	// ahead of the bookmark, so the bookmark never overtakes an event.
	RV         uint64
	Due        [][]*Watcher
	candidates []*Watcher

	// The batch being dispatched: its events' objects, the watchers that
	// get any of them in the order first met, and for each, what it
	// selects of each event (touched[i] gets objs[j] unless sels[i][j] is
	// 0).
	objs [DispatchBatch]EventObjects
	// atOnce counts, per event of the batch, the deliveries a client's
	// channel took straight from the dispatcher (dispatch_latency.go).
	atOnce  [DispatchBatch]uint32
	touched []*Watcher
	sels    []batchSelections
}

// batchSelections is what one watcher selects of each event of a batch.
type batchSelections [DispatchBatch]selection

// DispatchBatch is how many pending events the dispatcher hands out
// together. Each watcher then gets its share of the batch in one go: a
// client goroutine woken by the first event finds the rest in its channel
// instead of being woken once per event, which is most of the CPU of a
// fan-out to thousands of watchers (runtime.chansend waking a parked
// receiver). Only events already waiting are batched, so an idle cache
// adds no latency. At most 8 (a byte of mask bits), and below the
// channel's resultBuffer so a batch fits a reader that keeps up.
const DispatchBatch = 8

// dispatchSeq numbers the events dispatched by every dispatcher of the
// process, so a match class's memo is never taken for another event's, even
// one a second dispatcher of the same cache numbered (benchmarks run one).
var dispatchSeq atomic.Uint64

// DispatchEnv is what the dispatcher needs of its cache.
type DispatchEnv struct {
	Clock clock.PassiveClock
	// Candidates appends to dst the watchers that may want e (by trigger);
	// it takes the cache's read lock.
	Candidates func(dst []*Watcher, e *objects.Event) []*Watcher
	// Objects builds what each watcher is sent of e, once per event, which
	// the dispatcher took at dispatchedNanos.
	Objects func(e *objects.Event, dispatchedNanos int64) EventObjects
	// TooSlow stalls (or closes) a watcher that cannot keep up.
	TooSlow func(w *Watcher)
	// Dispatched counts an event dispatched, once whatever the watchers.
	Dispatched func()
	// Latency observes the deliveries clients took at once (nil: not).
	Latency *DispatchLatency
}

// Dispatch hands events, in order and at most dispatchBatch of them, to
// every interested watcher: each watcher gets its share at once, in order.
// It never waits for a client: a busy one has the events queued, one that
// fell behind is stalled (stall.go).
func (d *Dispatcher) Dispatch(events ...*objects.Event) {
	start := d.Env.Clock.Now().UnixNano()
	for j, e := range events {
		if e.RV > d.RV {
			d.RV = e.RV
		}
		if e.IsProgress() {
			continue
		}
		// Once per event, however many watchers get it, and never for a
		// progress notification: what upstream's
		// apiserver_watch_cache_events_dispatched_total counts since 1.38.
		d.Env.Dispatched()
		d.candidates = d.Env.Candidates(d.candidates[:0], e)
		d.objs[j] = d.Env.Objects(e, start)
		// The event's number, for the match classes' memo.
		seq := dispatchSeq.Add(1)
		for _, w := range d.candidates {
			// A watcher that started from a state at or after this event
			// already has it.
			if e.RV <= w.StartRV {
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
	now := d.Env.Clock.Now().UnixNano()
	for i, w := range d.touched {
		if !w.deliverBatch(&d.sels[i], &d.objs, &d.atOnce, now) {
			d.Env.TooSlow(w)
		}
	}
	for j, n := range d.atOnce[:len(events)] {
		if n > 0 {
			d.Env.Latency.sentAtOnce(d.objs[j].times(), n, now)
		}
	}
	clear(d.atOnce[:len(events)])
	clear(d.touched)
	clear(d.objs[:len(events)])
	d.touched, d.sels = d.touched[:0], d.sels[:0]
}
