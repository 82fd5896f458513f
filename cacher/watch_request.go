package cacher

import (
	"context"
	goerrors "errors"
	"fmt"
	"net/http"

	"k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachemetrics"
	"github.com/watchkeeper/watchkeeper/cacher/internal/hub"
	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
	"github.com/watchkeeper/watchkeeper/cacher/internal/state"
	"github.com/watchkeeper/watchkeeper/watchlist"
)

// The watch request: parse it, build its starting point (the state, or the
// history after its RV), register the watcher so it misses nothing between
// that point and its first live event. Delivery is dispatch.go and
// watcher.go.

// Watch implements storage.Interface: parse the request, wait for what it
// needs, register the watcher.
//
// The starting point follows the API's resourceVersion rules: unset or "0"
// without sendInitialEvents starts with the current state as ADDED events;
// sendInitialEvents=true sends the state, then the bookmark ending it at or
// above the WatchList floor; any other RV replays the history after it, or
// gets 410 Expired when the history no longer reaches back that far.
func (c *Cacher) Watch(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	if c.feed.OverBudget() {
		return c.watchOverBudget(ctx, key, opts)
	}
	w, err := c.watchCache(ctx, key, opts)
	if errors.IsTooManyRequests(err) && c.feed.OverBudget() {
		// The resource went over its budget while this watch waited.
		return c.watchOverBudget(ctx, key, opts)
	}
	return w, err
}

func (c *Cacher) watchCache(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	req, err := c.parseWatch(ctx, key, opts)
	if err != nil {
		return nil, err
	}
	if failed := c.waitForWatch(ctx, req); failed != nil {
		return failed, nil
	}
	return c.register(ctx, req)
}

// watchOverBudget is a watch of a resource over its memory budget: etcd's.
func (c *Cacher) watchOverBudget(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	c.metrics.ReadToStorage(cachemetrics.WatchOverBudget)
	return c.storage.Watch(ctx, key, opts)
}

// watchRequest is a parsed watch: its options, the RVs it asks for and
// needs, and its watcher, not yet registered.
type watchRequest struct {
	key  string
	opts storage.ListOptions
	// requestedRV is the RV asked for; requiredRV what the starting state
	// must include (etcd's current RV for a consistent start).
	requestedRV, requiredRV uint64
	// sendInitial is sendInitialEvents=true; fromState whether the watch
	// starts with the state as ADDED events (that, or RV unset or "0"
	// without sendInitialEvents).
	sendInitial, fromState bool
	w                      *hub.Watcher
	// sig is w's matchSignature, built outside every lock.
	sig string
}

// parseWatch checks the request and builds its watcher; its errors are the
// ones the storage would give.
func (c *Cacher) parseWatch(ctx context.Context, key string, opts storage.ListOptions) (*watchRequest, error) {
	key, err := storage.PrepareKey(c.cfg.ResourcePrefix, key, opts.Recursive)
	if err != nil {
		return nil, err
	}
	requestedRV, err := parseRequestRV(c.cfg.Versioner, opts.ResourceVersion)
	if err != nil {
		return nil, err
	}
	if opts.WatchWithoutPrevKV && !opts.Predicate.Empty() {
		// The etcd3 watcher's answer, so a caller learns of the mistake
		// whichever storage it watches: without previous values a
		// deletion's event has no object a predicate could match. With an
		// empty predicate the option means nothing to the cache.
		return nil, errors.NewInternalError(goerrors.New("watchWithoutPrevKV requires an empty predicate"))
	}
	if ready, since, _ := c.state.Readiness(); ready != state.Ready {
		return nil, notReadyError(c.clock.Now(), since)
	}
	req := &watchRequest{
		key:         key,
		opts:        opts,
		requestedRV: requestedRV,
		requiredRV:  requestedRV,
		sendInitial: opts.SendInitialEvents != nil && *opts.SendInitialEvents,
	}
	req.fromState = req.sendInitial || (requestedRV == 0 && opts.SendInitialEvents == nil)
	w := &hub.Watcher{
		Env:       c.watcherEnv,
		Pred:      opts.Predicate,
		Key:       key,
		Recursive: opts.Recursive,
		Bookmarks: opts.Predicate.AllowWatchBookmarks,
		Result:    make(chan watch.Event, hub.ResultBuffer),
	}
	w.Deadline, _ = ctx.Deadline()
	if w.Shard, err = objects.NewShardFilter(opts.Predicate); err != nil {
		return nil, errors.NewBadRequest(err.Error())
	}
	w.TriggerValue, w.Triggered = c.trigger.ValueFor(opts.Predicate)
	req.w, req.sig = w, hub.MatchSignature(w)
	return req, nil
}

// waitForWatch waits for what the watch needs before it can start: etcd's
// current RV for a consistent start, a cache fresh enough for a WatchList,
// the history read back for a resume from before the cache's list. A
// failure is the watcher to return: once a watch request has been accepted
// its failures are reported in the stream, as etcd3 does.
func (c *Cacher) waitForWatch(ctx context.Context, req *watchRequest) watch.Interface {
	opts := req.opts
	if opts.ResourceVersion == "" && opts.SendInitialEvents != nil {
		// A consistent start: the state must include every write etcd has.
		rv, err := c.feed.StorageRV(ctx)
		if err != nil {
			return newErrWatcher(err)
		}
		req.requiredRV = rv
	}
	if req.sendInitial && req.requiredRV > 0 {
		// The initial state must be at least as fresh as the RV asked for.
		// A plain watch waits for nothing (upstream's rule, and etcd's): it
		// starts at once and hears the events after its RV when the cache
		// applies them. A WatchList ends with the 504 rather than waiting
		// on: client-go then falls back to a LIST, which etcd can serve.
		if err := c.feed.WaitFresh(ctx, req.requiredRV); err != nil {
			c.metrics.FreshnessTimedOut(cachemetrics.RequestWatchList, err)
			return newErrWatcher(err)
		}
	}
	if req.requestedRV > 0 && !req.sendInitial {
		if start, fromList := c.state.HistoryStart(); req.requestedRV < start && fromList && !c.unchangedSince(req.key, opts, req.requestedRV) {
			// A resume from before the cache's list: etcd may still have
			// what it missed. Failing that, the 410 stands.
			//
			// Waiting for the backfill is no work of this request's (one
			// backfill a resource, on the cache's goroutine), so it lets
			// go of its API Priority and Fairness seat first: at a restart
			// of many kubelets, node watches waiting here up to
			// backfillTimeout would hold node-high's seats, and the leases
			// and node status calls would queue behind them (stock's
			// resumes get their 410 at once).
			hub.SignalInitialized(ctx)
			if err := c.feed.Backfill(ctx, req.requestedRV); err != nil {
				c.logger.V(4).Info("Resume without a backfill", "from", req.requestedRV, "err", err)
			}
		}
	}
	return nil
}

// register builds the watcher's starting point and registers it, then
// ties it to the request's context.
func (c *Cacher) register(ctx context.Context, req *watchRequest) (watch.Interface, error) {
	var start startingState
	if req.fromState {
		var err error
		if start.initial, start.objs, start.rv, err = c.initialState(ctx, req.key, req.opts); err != nil {
			return nil, err
		}
	}
	var failed watch.Interface
	var err error
	c.state.Read(func() { failed, err = c.startLocked(ctx, req, start) })
	if failed != nil || err != nil {
		return failed, err
	}
	w := req.w
	// The request's context ending (client gone, deadline) ends the watch.
	// Registered after the lock: an ended context runs it at once.
	w.UntilClosed(context.AfterFunc(ctx, func() { c.forgetWatcher(w, false) }))
	return w, nil
}

// startingState is the state a watch from the state was built from,
// outside the lock: its events, its objects and its RV.
type startingState struct {
	initial []watch.Event
	objs    []*objects.Object
	rv      uint64
}

// startLocked, in one hold of the state's read lock (the caller's), works
// out the events the watcher starts with and registers it with the hub,
// atomically with the state it starts from: the dispatcher then hands it
// exactly the events after w.startRV (hub.go says why). failed is the
// watcher to return instead (a 410).
func (c *Cacher) startLocked(ctx context.Context, req *watchRequest, start startingState) (failed watch.Interface, err error) {
	w, opts := req.w, req.opts
	if since, notReady := c.state.NotReadyLocked(); notReady {
		return nil, notReadyError(c.clock.Now(), since)
	}
	initial := start.initial
	rv := c.state.RVLocked()
	switch {
	case req.fromState:
		// The state was read at start.rv; what the cache applied since is
		// in the history and is folded into it, so the client starts from
		// the state at rv (initial_state.go). When the history no longer
		// reaches back to start.rv (a relist, or a write storm at capacity
		// while the state was built), the state is read again, here.
		if events, ok := c.state.SinceLocked(start.rv); ok {
			initial = c.fold(initial, start.objs, w, events)
		} else {
			initial, _ = c.initialAdded(c.state.ObjectsLocked(req.key, opts.Recursive), opts.Predicate, rv)
		}
		w.StartRV = rv
	case req.requestedRV == 0:
		// From now: etcd's current RV when it was read (RV "" with
		// sendInitialEvents=false), or wherever the cache is.
		w.StartRV = max(req.requiredRV, rv)
	default:
		from := req.requestedRV
		if oldest := c.state.HistoryStartLocked(); from < oldest {
			// One object, unchanged in the gap: it resumes from the
			// history's start (resume_single.go).
			if objKey, name, ok := singleObject(req.key, opts); ok && c.unchangedSinceLocked(objKey, name, req.requestedRV) {
				from = oldest
			}
		}
		events, ok := c.state.SinceLocked(from)
		if !ok {
			c.metrics.ExpiredWatches.Inc()
			return newErrWatcher(c.tooOldLocked(req.requestedRV)), nil
		}
		initial = c.appendInterested(initial, w, events)
		w.StartRV = max(req.requestedRV, rv)
	}
	floor := uint64(0)
	if req.sendInitial && w.Bookmarks {
		floor = max(watchlist.Floor(opts.ResourceVersion, req.requestedRV, req.requiredRV, rv), 1)
	}
	w.Tracker = watchlist.NewTracker(floor)
	if floor > 0 && rv >= floor {
		// The cache already holds the floor: end the initial events now
		// rather than on the next tick (kubernetes issue 122277).
		end, err := c.watcherEnv.EndBookmark(rv)
		if err != nil {
			return nil, err
		}
		w.Tracker.Accept(rv)
		initial = append(initial, watch.Event{Type: watch.Bookmark, Object: end})
	}
	c.metrics.WatcherArrived(w.Tracker.State(), w.Shard != nil)
	c.metrics.InitEvents.Add(float64(len(initial)))
	// Queued before the dispatcher can see the watcher, so they come
	// first; under the lock that saw the cache ready, so Stop waits for
	// the pump.
	w.Start(ctx, initial)
	c.hub.Add(w, req.sig, c.clock.Now())
	return nil, nil
}

// tooOldLocked is the 410 a watch from rv gets once the history no longer
// holds rv, naming the oldest RV a watch may resume from. The caller holds
// the state's read lock.
func (c *Cacher) tooOldLocked(rv uint64) *errors.StatusError {
	return errors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", rv, c.state.ResumableFromLocked()))
}

// appendInterested appends what w is sent of events, those that concern it.
func (c *Cacher) appendInterested(out []watch.Event, w *hub.Watcher, events []*objects.Event) []watch.Event {
	for _, e := range events {
		if sel := w.Selects(e); sel != 0 {
			objs := c.objectsOf(e, 0) // not dispatched: initial events are not timed
			if ev, ok := objs.ForSelection(sel); ok {
				out = append(out, ev)
			}
		}
	}
	return out
}

// errWatcher delivers one error event and closes: once a watch request has
// been accepted, failures are reported in the stream, as etcd3 does.
type errWatcher struct{ result chan watch.Event }

func newErrWatcher(err error) watch.Interface {
	w := &errWatcher{result: make(chan watch.Event, 1)}
	w.result <- errorEvent(err)
	close(w.result)
	return w
}

// errorEvent is err as a watch's error event: its status, or a 500.
func errorEvent(err error) watch.Event {
	ev := watch.Event{Type: watch.Error}
	var status *errors.StatusError
	var obj runtime.Object
	switch {
	case goerrors.As(err, &status):
		ev.Object = &status.ErrStatus
	case goerrors.As(err, &obj):
		ev.Object = obj
	default:
		ev.Object = &metav1.Status{
			Status:  metav1.StatusFailure,
			Message: err.Error(),
			Reason:  metav1.StatusReasonInternalError,
			Code:    http.StatusInternalServerError,
		}
	}
	return ev
}

func (w *errWatcher) ResultChan() <-chan watch.Event { return w.result }
func (w *errWatcher) Stop()                          {}
