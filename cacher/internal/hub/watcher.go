package hub

import (
	"context"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
	utilflowcontrol "k8s.io/apiserver/pkg/util/flowcontrol"
	"k8s.io/utils/clock"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachemetrics"
	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
	"github.com/watchkeeper/watchkeeper/watchlist"
)

// ResultBuffer is how many events wait in the client's channel, and so stay
// readable after Stop (the storage conformance suite's delayed-delivery test
// wants upstream's 10). They also let the dispatcher hand over a burst
// without queueing. Each slot costs every idle watcher 32 bytes.
const ResultBuffer = 10

// SlowClientTimeout is how long a client may leave its queued events unread
// before the watcher gives up its queue and stalls (stall.go; or is closed,
// with stalling off). The dispatcher never waits for a client, so this only
// bounds how long a client that stopped reading holds its queue.
const SlowClientTimeout = 10 * time.Second

// watcherState is where a watcher is in its life.
type watcherState uint8

const (
	watcherOpen watcherState = iota
	// watcherStalled fell behind: it gave up its queue, is out of the
	// hub's fan-out, and is fed again from the history when its client
	// reads again (stall.go).
	watcherStalled
	// watcherDraining takes nothing new and closes once its queue is read.
	watcherDraining
	watcherClosed
)

// Watcher is one client's watch. It has no goroutine while its client keeps
// up: the dispatcher hands each event straight to the client's channel, and a
// pump goroutine runs only while events are queued behind a busy client.
// An idle watch then costs a few hundred bytes instead of a goroutine stack
// (upstream runs one goroutine per watch).
type Watcher struct {
	Env       *WatcherEnv
	Pred      storage.SelectionPredicate
	Key       string // exact key, or prefix when recursive
	Recursive bool
	// Shard is the watch's shard selector compiled, nil when not sharded.
	Shard    *objects.ShardFilter
	Deadline time.Time
	// TriggerValue is the trigger field's value the watcher's selector pins,
	// when triggered; see watcherSet.
	TriggerValue string
	Triggered    bool
	// Bookmarks is whether the client asked for bookmarks at all.
	Bookmarks bool
	// batchSlot belongs to the dispatcher goroutine: the watcher's place
	// in the batch being dispatched, if it is in it.
	batchSlot int32
	// class is the watchers that select as this one does, set when the
	// watcherSet files it (nil for a watcher never filed).
	class *matchClass

	// StartRV is the RV of the state the client starts from: live events at
	// or below it are already covered by the initial events and are dropped.
	// It is written only while the watcher is out of the hub (before Add,
	// and by Rejoin before Resume), and read by the dispatcher and the tick
	// only while it is in.
	StartRV uint64

	Result chan watch.Event
	// stopOnCancel unhooks the request context's cancellation.
	stopOnCancel func() bool

	// mu guards everything below: the dispatcher queues, the pump delivers,
	// Stop and the request context close.
	mu    sync.Mutex
	state watcherState
	queue []watch.Event
	head  int
	// live is, for each event queued behind the initial ones, when it was
	// queued and its RV: queue[timedFrom+i] is live[i]. The initial events
	// ahead of them (the first timedFrom) are not timed, and are all at or
	// below StartRV.
	live      []queuedLive
	timedFrom int
	// sentRV is the watcher's position: the RV of the last event or
	// bookmark its client's channel took (StartRV until one did). A
	// stalled watcher keeps only this, and resumes after it.
	sentRV uint64
	// stalledNanos is when the watcher last stalled, for the log.
	stalledNanos int64
	// pumping is whether a pump goroutine owns the delivery of the queue.
	pumping bool
	// done wakes a pump blocked on the client when the watcher is closed;
	// made with the first pump, as idle watchers never need it.
	done chan struct{}
	// blockedSinceNanos is when the dispatcher last saw the client take an
	// event while others were queued (or queued the first): taken counts
	// what the pump handed over, seenTaken what the dispatcher last saw, so
	// the pump never reads the clock.
	blockedSinceNanos int64
	taken, seenTaken  uint64
	// initialLeft counts the initial events (and end bookmark) not yet
	// delivered; they are not bounded by the queue limit.
	initialLeft int
	initCtx     context.Context
	Tracker     watchlist.Tracker
}

var _ watch.Interface = (*Watcher)(nil)

// queuedLive is what a watcher keeps of an event queued behind its initial
// events besides the event: when it was queued (0: not timed, as an event
// fed from the history is not) and its RV, which becomes the watcher's
// position once its client takes it.
type queuedLive struct {
	at int64
	rv uint64
}

// WatcherEnv is what a watcher needs of its cache, given rather than the
// cache itself, so a watcher can be tested alone. One per cache, shared by
// its watchers.
type WatcherEnv struct {
	Clock clock.PassiveClock
	// Buffer bounds the events queued behind a client (Config.WatcherBuffer).
	Buffer int
	// Stop ends every pump when the cache stops; wg owns the pumps.
	Stop <-chan struct{}
	WG   *sync.WaitGroup
	// Forget removes a watcher from the cache (Stop), graceful or not.
	Forget func(w *Watcher, graceful bool)
	// Moved counts a watcher moving between WatchList states.
	Moved func(from, to watchlist.State)
	// Bookmark builds an empty object at rv; dropped reports what could not
	// be built.
	Bookmark func(rv uint64) (runtime.Object, error)
	Dropped  func(what string, rv uint64, err error, keysAndValues ...any)
	// Latency observes each live event a client's channel takes (nil: not).
	Latency *DispatchLatency
	// Feed is called, on the watcher's pump, when a stalled watcher's
	// client has taken everything kept for it: the cache feeds it again
	// from the history (Refill), registers it with the hub again (Rejoin,
	// Hub.Resume), or ends it (Expire). Nil for watchers that never stall.
	Feed func(w *Watcher)
}

// EndBookmark is a bookmark at rv annotated as the end of a WatchList's
// initial events: a new watch's when the cache holds its floor, a stalled
// one's when it rejoins, the tick's when the floor is reached.
func (env *WatcherEnv) EndBookmark(rv uint64) (runtime.Object, error) {
	end, err := env.Bookmark(rv)
	if err == nil {
		err = storage.AnnotateInitialEventsEndBookmark(end)
	}
	return end, err
}

// ResultChan implements watch.Interface.
func (w *Watcher) ResultChan() <-chan watch.Event { return w.Result }

// Stop implements watch.Interface. Events already in the channel stay
// readable; what is still queued is dropped.
func (w *Watcher) Stop() { w.Env.Forget(w, false) }

// Selects is what of e concerns this watcher: nothing unless the key is
// its, and then whether its selector matches the object after the change,
// and before it.
func (w *Watcher) Selects(e *objects.Event) selection {
	o := e.Cur
	if o == nil {
		o = e.Prev
	}
	if w.Recursive {
		if !strings.HasPrefix(o.Key, w.Key) {
			return 0
		}
	} else if o.Key != w.Key {
		return 0
	}
	if w.Shard != nil && !w.Shard.Selects(o) {
		// cur and prev are in one shard: the shard key is immutable.
		return 0
	}
	var sel selection
	if objects.MatchesAttrs(w.Pred, e.Cur) {
		sel |= SelectsCur
	}
	if objects.MatchesAttrs(w.Pred, e.Prev) {
		sel |= selectsPrev
	}
	return sel
}

// byShard is whether the watcherSet files w by its shard's ranges: a
// sharded watch of a prefix not already filed by a trigger value.
func (w *Watcher) byShard() bool { return w.Shard != nil && w.Recursive && !w.Triggered }

// floorReached reports whether the WatchList bookmark floor has been met,
// for the bookmark policy.
func (w *Watcher) floorReached() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.Tracker.FloorReached()
}

func (w *Watcher) queuedLocked() int { return len(w.queue) - w.head }

// Pending is what the client has not taken yet: the events in its channel
// and those queued behind it.
func (w *Watcher) Pending() (inChannel, queued int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.Result), w.queuedLocked()
}

// Start hands the watcher its initial events (nil for none) before it is
// visible to the dispatcher, so they come first. The caller holds the
// state's read lock, under which Stop cannot have started waiting for the
// pump.
func (w *Watcher) Start(ctx context.Context, initial []watch.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.queue = initial
	w.timedFrom = len(initial)
	w.initialLeft = len(initial)
	w.sentRV = w.StartRV
	if w.initialLeft == 0 {
		SignalInitialized(ctx)
		return
	}
	w.initCtx = ctx
	w.blockedSinceNanos = w.Env.Clock.Now().UnixNano()
	w.startPumpLocked()
}

// deliver hands ev to the client, or queues it behind what the client has
// not taken yet. It never waits. It reports false when the client is too far
// behind (the queue is full, or nothing was taken for SlowClientTimeout):
// the caller then stalls the watcher, or closes it. It is for tests: the
// event's RV is not recorded, so the watcher's position does not move.
// nowNanos is the dispatcher's clock reading for this event (one read per
// event rather than one per watcher behind).
func (w *Watcher) deliver(ev watch.Event, nowNanos int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	ok, _ := w.deliverLocked(ev, 0, nowNanos)
	return ok
}

// deliverBatch delivers the events of a dispatch batch the watcher selects
// something of (sels[j] for objs[j]), in order, under one hold of the lock,
// counting in atOnce[j] a delivery of objs[j] the client's channel took at
// once; false when the client is too slow for them.
func (w *Watcher) deliverBatch(sels *batchSelections, objs *[DispatchBatch]EventObjects, atOnce *[DispatchBatch]uint32, nowNanos int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for j, sel := range sels {
		if sel == 0 {
			continue
		}
		ev, ok := objs[j].ForSelection(sel)
		if !ok {
			continue
		}
		ok, direct := w.deliverLocked(ev, objs[j].Event.RV, nowNanos)
		if !ok {
			return false
		}
		if direct {
			atOnce[j]++
		}
	}
	return true
}

// deliverLocked hands ev, at rv, to the client's channel (atOnce) or queues
// it; ok is false when the client is too slow for it.
func (w *Watcher) deliverLocked(ev watch.Event, rv uint64, now int64) (ok, atOnce bool) {
	if w.state != watcherOpen {
		return true, false
	}
	queued := w.queuedLocked()
	if queued == 0 && !w.pumping {
		select {
		case w.Result <- ev:
			w.deliveredLocked(ev, rv)
			return true, true
		default:
		}
	}
	if !w.roomLocked(queued, now) {
		return false, false
	}
	if queued == 0 {
		w.blockedSinceNanos = now
	}
	w.queue = append(w.queue, ev)
	w.live = append(w.live, queuedLive{at: now, rv: rv})
	if !w.pumping {
		w.startPumpLocked()
	}
	return true, false
}

// roomLocked is whether the client is keeping up well enough to be queued
// one more event.
func (w *Watcher) roomLocked(queued int, nowNanos int64) bool {
	if queued >= w.Env.Buffer+w.initialLeft {
		return false
	}
	if w.taken != w.seenTaken {
		w.seenTaken, w.blockedSinceNanos = w.taken, nowNanos
	}
	return queued == 0 || time.Duration(nowNanos-w.blockedSinceNanos) <= SlowClientTimeout
}

// deliveredLocked records that the client's channel took ev, at rv (0 for
// an initial event: the position stays at StartRV until they are out).
func (w *Watcher) deliveredLocked(ev watch.Event, rv uint64) {
	w.sentRV = max(w.sentRV, rv)
	// While the marker is on its way no other bookmark is queued, so the
	// bookmark delivered now is the marker (annotated when it was built).
	if ev.Type == watch.Bookmark && w.Tracker.Delivered() {
		w.Env.Moved(watchlist.BookmarkReceived, watchlist.BookmarkSent)
	}
}

func (w *Watcher) startPumpLocked() {
	if w.done == nil {
		w.done = make(chan struct{})
	}
	w.pumping = true
	w.Env.WG.Add(1)
	go w.pump()
}

// pump delivers the queue to a client that was busy when events came, and
// exits once the queue is empty.
func (w *Watcher) pump() {
	defer w.Env.WG.Done()
	for {
		w.mu.Lock()
		if w.state == watcherClosed {
			w.pumping = false
			close(w.Result)
			w.releaseLocked()
			w.mu.Unlock()
			return
		}
		if w.queuedLocked() == 0 {
			if w.state == watcherStalled {
				// The client took everything kept for it: the cache
				// feeds it again, or ends it (stall.go). Either changes
				// what this loop finds next.
				w.mu.Unlock()
				w.Env.Feed(w)
				continue
			}
			w.pumping = false
			w.queue, w.head = releaseQueue(w.queue), 0
			w.live, w.timedFrom = releaseQueue(w.live), 0
			if w.state == watcherDraining {
				w.closeLocked()
			}
			w.mu.Unlock()
			return
		}
		ev, done := w.queue[w.head], w.done
		var live queuedLive
		if i := w.head - w.timedFrom; i >= 0 {
			live = w.live[i]
		}
		w.mu.Unlock()

		var dequeuedAt int64
		if live.at != 0 {
			dequeuedAt = w.Env.Clock.Now().UnixNano()
		}
		select {
		case w.Result <- ev:
			if live.at != 0 {
				w.Env.Latency.sent(ev, live.at, dequeuedAt, w.Env.Clock.Now().UnixNano())
			}
		case <-done:
			continue
		case <-w.Env.Stop:
			// The cache stopping ends even a watcher draining towards a
			// client that does not read, so Stop never waits on a client.
			w.Terminate()
			continue
		}

		var initialized context.Context
		w.mu.Lock()
		if w.state != watcherClosed {
			w.queue[w.head] = watch.Event{}
			w.head++
			w.taken++
			w.deliveredLocked(ev, live.rv)
			if w.initialLeft > 0 {
				w.initialLeft--
				if w.initialLeft == 0 {
					initialized, w.initCtx = w.initCtx, nil
				}
			}
		}
		w.mu.Unlock()
		if initialized != nil {
			SignalInitialized(initialized)
		}
	}
}

// smallQueue is the most events a queue's array keeps for the next burst:
// one a burst grew larger is let go when drained (releaseQueue) or when the
// watcher stalls (Stall).
const smallQueue = 64

// releaseQueue keeps a drained queue's array for the next burst unless a
// burst made it large.
func releaseQueue[T any](q []T) []T {
	if cap(q) > smallQueue {
		return nil
	}
	return q[:0]
}

// Terminate closes the watcher at once; what is queued is dropped.
func (w *Watcher) Terminate() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state == watcherClosed {
		return
	}
	w.state = watcherClosed
	w.queue, w.head = nil, 0
	w.live, w.timedFrom = nil, 0
	w.releaseLocked()
	if w.done != nil {
		close(w.done)
	}
	if !w.pumping {
		w.closeLocked()
	}
}

// releaseLocked lets go of the request: a closed watcher may stay filed on
// the bookmark calendar until its slot comes up (up to a period), and must
// not keep the request's context and what hangs off it alive until then.
func (w *Watcher) releaseLocked() {
	if w.stopOnCancel != nil {
		w.stopOnCancel()
		w.stopOnCancel = nil
	}
	w.initCtx = nil
}

// Drain lets the client read what is queued, then closes the watcher. A
// stalled one is fed nothing more: its client gets what was kept for it,
// and resumes from there.
func (w *Watcher) Drain() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != watcherOpen && w.state != watcherStalled {
		return
	}
	w.state = watcherDraining
	if !w.pumping {
		w.closeLocked()
	}
}

// closeLocked closes the client's channel; called once, by whoever sees the
// watcher ending with no pump running.
func (w *Watcher) closeLocked() {
	w.state = watcherClosed
	close(w.Result)
	w.releaseLocked()
}

// OfferBookmark queues a bookmark at the dispatched RV (or the watcher's
// start, if later) unless the floor refuses it or events are already queued,
// which is proof of life enough (behindEvents: then it goes behind them).
// shared is the tick's bookmark at the dispatched RV, used when no
// initial-events-end marker is due. It reports whether a bookmark was
// queued.
func (w *Watcher) OfferBookmark(dispatchedRV uint64, shared func() *objects.SharedObject, nowNanos int64, behindEvents bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	rv := max(dispatchedRV, w.StartRV)
	if w.state != watcherOpen || rv < w.Tracker.Floor() {
		return false
	}
	before := w.Tracker.State()
	queued := w.queuedLocked()
	if before == watchlist.BookmarkReceived || (queued > 0 && before == watchlist.BookmarkSent && !behindEvents) {
		// A marker is already on its way, or events are.
		return false
	}
	if !w.roomLocked(queued, nowNanos) {
		// The next tick offers the marker again, or the next event finds
		// the client too slow.
		return false
	}
	var obj runtime.Object
	if before == watchlist.BookmarkSent && rv == dispatchedRV {
		if s := shared(); s != nil {
			obj = s.ForWatcher()
		}
	}
	if obj == nil {
		build := w.Env.Bookmark
		if before == watchlist.WaitingForBookmark {
			build = w.Env.EndBookmark
		}
		own, err := build(rv)
		if err != nil {
			w.Env.Dropped(cachemetrics.DropBookmark, rv, err)
			return false
		}
		obj = own
	}
	ev := watch.Event{Type: watch.Bookmark, Object: obj}
	w.Tracker.Accept(rv)
	if after := w.Tracker.State(); after != before {
		w.Env.Moved(before, after)
	}
	ok, _ := w.deliverLocked(ev, rv, nowNanos)
	return ok
}

// SignalInitialized tells API priority and fairness that the watch's
// initial burst is out, so it stops counting the request as in flight.
func SignalInitialized(ctx context.Context) { utilflowcontrol.WatchInitialized(ctx) }

// TookAll is whether the client took everything queued for it, or the
// watcher closed.
func (w *Watcher) TookAll() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state == watcherClosed || (w.queuedLocked() == 0 && len(w.Result) == 0)
}

// ListState is the watcher's WatchList state now.
func (w *Watcher) ListState() watchlist.State {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.Tracker.State()
}

// Leaving reports the watcher's WatchList state and whether it is sharded
// to record, under its lock, so no move between states (offerBookmark,
// deliveredLocked) comes between the read and the record.
func (w *Watcher) Leaving(record func(state watchlist.State, sharded bool)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	record(w.Tracker.State(), w.Shard != nil)
}

// UntilClosed keeps stop, which unhooks the request context's
// cancellation, until the watcher lets go of its request; a watcher
// already closed calls it at once.
func (w *Watcher) UntilClosed(stop func() bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state == watcherClosed {
		stop()
		return
	}
	w.stopOnCancel = stop
}
