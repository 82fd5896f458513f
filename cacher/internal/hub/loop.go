package hub

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/watchkeeper/watchkeeper/bookmarks"
	"github.com/watchkeeper/watchkeeper/cacher/internal/cachemetrics"
	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
)

// Loop is the fan-out's goroutine, the dispatcher's: it takes the events
// the feed applied, in order, and hands them out (Dispatcher), runs the
// bookmark tick, and answers the shutdown's request for a bookmark to every
// watcher. All three run on it, so a bookmark carries the RV the dispatcher
// has handed out and never overtakes an event. Its state is the
// goroutine's; what others call (Incoming, BookmarkEvery, LastTick) is a
// channel or an atomic.
type Loop struct {
	hub *Hub
	env LoopEnv
	// incoming is the applied events the dispatcher has not taken yet: the
	// feed waits when it is full.
	incoming chan *objects.Event
	// bookmarkAll asks the loop for a bookmark to every watcher
	// (BookmarkEvery); it answers on the request's channel.
	bookmarkAll chan bookmarkAllRequest
	// lastTickNanos is how long the last bookmark tick took.
	lastTickNanos atomic.Int64
}

// LoopEnv is what the loop needs of its cache besides the hub.
type LoopEnv struct {
	Clock clock.WithTicker
	// Granularity and Jitter are the tick's (bookmarks.NewTick).
	Granularity time.Duration
	Jitter      float64
	// Stop ends the loop; WG owns its goroutine.
	Stop    <-chan struct{}
	WG      *sync.WaitGroup
	Metrics *cachemetrics.Resource
	Logger  klog.Logger
	// Objects builds what each watcher is sent of an event; TooSlow stalls
	// (or closes) a watcher that cannot keep up; Bookmark builds an empty
	// object at an RV.
	Objects  func(e *objects.Event, dispatchedNanos int64) EventObjects
	TooSlow  func(w *Watcher)
	Bookmark func(rv uint64) (runtime.Object, error)
	// BeforeTick runs first on every tick: the fresh-bookmark probe, which
	// may ask etcd for progress before bookmarks come due.
	BeforeTick func(now time.Time)
	// Latency observes the deliveries clients took at once (nil: not).
	Latency *DispatchLatency
}

// NewLoop is the loop of h, its input bounded by buffer events; Start runs
// it.
func NewLoop(h *Hub, env LoopEnv, buffer int) *Loop {
	return &Loop{hub: h, env: env, incoming: make(chan *objects.Event, buffer), bookmarkAll: make(chan bookmarkAllRequest)}
}

// Incoming is where the feed puts each event it applied.
func (l *Loop) Incoming() chan<- *objects.Event { return l.incoming }

// LastTick is how long the last bookmark tick took.
func (l *Loop) LastTick() time.Duration { return time.Duration(l.lastTickNanos.Load()) }

// Start runs the loop until Stop closes.
func (l *Loop) Start() {
	l.env.WG.Add(1)
	go l.run()
}

// NewDispatcher is a dispatcher over the loop's hub, as the loop runs one
// (benchmarks run their own).
func (l *Loop) NewDispatcher() *Dispatcher {
	return &Dispatcher{Env: DispatchEnv{
		Clock: l.env.Clock,
		Candidates: func(dst []*Watcher, e *objects.Event) []*Watcher {
			dst, filtered := l.hub.Candidates(dst, e)
			if filtered > 0 {
				l.env.Metrics.ShardFiltered.Add(float64(filtered))
			}
			return dst
		},
		Objects:    l.env.Objects,
		TooSlow:    l.env.TooSlow,
		Dispatched: l.env.Metrics.EventsDispatched.Inc,
		Latency:    l.env.Latency,
	}}
}

func (l *Loop) run() {
	defer l.env.WG.Done()
	d := l.NewDispatcher()
	batch := make([]*objects.Event, 0, DispatchBatch)
	tick := bookmarks.NewTick(l.env.Clock, l.env.Granularity, l.env.Jitter)
	defer tick.Stop()
	// Shutdown bookmarks waiting for the dispatcher to reach their RV: one
	// per BookmarkEvery call in flight.
	var waiting []bookmarkAllRequest
	for {
		select {
		case <-l.env.Stop:
			return
		case e := <-l.incoming:
			batch = append(batch[:0], e)
		more:
			for len(batch) < DispatchBatch {
				select {
				case e := <-l.incoming:
					batch = append(batch, e)
				default:
					break more
				}
			}
			d.Dispatch(batch...)
			clear(batch)
			waiting = l.answerBookmarkAll(waiting, d.RV)
		case <-tick.C():
			d.Due = l.Tick(d.RV, d.Due)
			tick.Rearm()
		case req := <-l.bookmarkAll:
			waiting = l.answerBookmarkAll(append(waiting, req), d.RV)
		}
	}
}

// Tick sends the watchers due a bookmark at rv (the dispatcher's: every
// event at or below it is queued ahead) and files them again; that is all
// it does (the feed's checks have their own timer). With nothing due it
// touches no watcher. due is the dispatcher's scratch slice, returned for
// reuse. It runs on the loop's goroutine (benchmarks call it alone).
func (l *Loop) Tick(rv uint64, due [][]*Watcher) [][]*Watcher {
	start := l.env.Clock.Now()
	// Before the pop: the watchers due now are filed again after this
	// tick, and those are the ones the next tick serves.
	l.env.BeforeTick(start)
	due = l.hub.PopDue(due[:0])
	if len(due) == 0 {
		l.observeTick(start)
		return due
	}

	sharedBookmark := l.sharedBookmark(rv)
	nowNanos := l.env.Clock.Now().UnixNano()
	// A watcher closed since it was filed is skipped.
	sent, count := l.hub.Offer(due, func(w *Watcher) bool {
		return w.OfferBookmark(rv, sharedBookmark, nowNanos, false)
	})
	l.hub.Refile(due, l.env.Clock.Now())
	clear(due)
	l.env.Metrics.BookmarksSent.Add(float64(sent))
	l.env.Metrics.WatchersDue.Observe(float64(count))
	l.observeTick(start)
	if sent < count {
		l.env.Logger.V(6).Info("Bookmark tick", "due", count, "sent", sent, "rv", rv)
	}
	return due
}

// sharedBookmark builds, when first called, one bookmark object at rv for
// every watcher offered one, encoded once per encoder.
func (l *Loop) sharedBookmark(rv uint64) func() *objects.SharedObject {
	var shared *objects.SharedObject
	return func() *objects.SharedObject {
		if shared == nil {
			obj, err := l.env.Bookmark(rv)
			if err == nil {
				shared, err = objects.Share(obj)
			}
			if err != nil {
				// Each watcher then builds its own, and reports it failing.
				l.env.Logger.V(2).Info("Could not build a shared bookmark", "resourceVersion", rv, "err", err)
			}
		}
		return shared
	}
}

func (l *Loop) observeTick(start time.Time) {
	took := l.env.Clock.Since(start)
	l.lastTickNanos.Store(int64(took))
	l.env.Metrics.TickDuration.Observe(took.Seconds())
}

// bookmarkAllRequest is a BookmarkEvery call's request to the loop: the
// bookmarks go out once it has dispatched atLeast, and the watchers they
// went to come back on reply (buffered: a caller that gave up is not waited
// for).
type bookmarkAllRequest struct {
	atLeast uint64
	reply   chan []*Watcher
}

// BookmarkEvery queues, for every watcher whose client takes bookmarks, one
// at the RV the loop has dispatched once that is at least atLeast, behind
// whatever is queued for it, and returns the watchers it went to; false
// when ctx ended or the loop stopped first.
func (l *Loop) BookmarkEvery(ctx context.Context, atLeast uint64) ([]*Watcher, bool) {
	req := bookmarkAllRequest{atLeast: atLeast, reply: make(chan []*Watcher, 1)}
	select {
	case l.bookmarkAll <- req:
	case <-l.env.Stop:
		return nil, false
	case <-ctx.Done():
		return nil, false
	}
	select {
	case ws := <-req.reply:
		return ws, true
	case <-ctx.Done():
		return nil, false
	case <-l.env.Stop:
		return nil, false
	}
}

// answerBookmarkAll runs on the loop's goroutine: it answers the requests
// whose RV the dispatcher has reached, at rv, and returns the others.
func (l *Loop) answerBookmarkAll(waiting []bookmarkAllRequest, rv uint64) []bookmarkAllRequest {
	return slices.DeleteFunc(waiting, func(req bookmarkAllRequest) bool {
		if req.atLeast > rv {
			return false
		}
		req.reply <- l.bookmarkEvery(rv)
		return true
	})
}

// bookmarkEvery is BookmarkEvery's work on the loop's goroutine, at the
// dispatcher's RV: every event at or below it is queued ahead.
func (l *Loop) bookmarkEvery(rv uint64) []*Watcher {
	shared := l.sharedBookmark(rv)
	nowNanos := l.env.Clock.Now().UnixNano()
	var sent []*Watcher
	l.hub.Each(func(w *Watcher) {
		if w.Bookmarks && w.OfferBookmark(rv, shared, nowNanos, true) {
			sent = append(sent, w)
		}
	})
	l.env.Metrics.BookmarksSent.Add(float64(len(sent)))
	return sent
}
