package cacher

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/grpc/metadata"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachemetrics"
	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
)

// Backoff between failed list-and-watch attempts: fast at first, so a blip
// costs little, capped so an outage does not hammer etcd.
const (
	initialBackoff = 100 * time.Millisecond
	maxBackoff     = 30 * time.Second
)

// errWatchClosed means the storage watch ended without an error: resume it.
var errWatchClosed = fmt.Errorf("storage watch closed")

// reflectLoop is the reflector goroutine: it keeps the cache in step with
// the wrapped storage, relisting when it must and backing off on failure.
func (c *Cacher) reflectLoop() {
	defer c.wg.Done()
	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(context.Background(), c.feed.watchMetadata))
	defer cancel()
	go func() {
		select {
		case <-c.stopCh:
			cancel()
		case <-ctx.Done():
		}
	}()

	backoff := initialBackoff
	for {
		listed, err := c.listAndWatch(ctx)
		if c.stopping() {
			return
		}
		if listed {
			backoff = initialBackoff
		}
		c.metrics.InitializationErrors.Inc()
		c.logger.Error(err, "Watch cache lost its watch; relisting", "backoff", backoff)
		c.goNotReady(cachemetrics.NotReadyRelist, c.terminateAll)
		select {
		case <-c.stopCh:
			return
		case <-c.clock.After(wait.Jitter(backoff, 0.5)):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

func (c *Cacher) stopping() bool { return closed(c.stopCh) }

// closed reports whether ch, a channel only ever closed, has been.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// listAndWatch lists the resource, makes it the cache's state, and follows
// the storage watch from there until it fails in a way a re-watch cannot
// mend: a compaction past the cache's RV, or an error of the cache's own.
// Transient failures (etcd's troubles, a silent watch) re-open the watch
// from the cache's RV, its client watches staying open; the cache stays
// ready through them unless the watch went silent or the failures outlast
// storageWatchRetryWindow, and is ready again once the watch answers.
// listed reports whether the list succeeded.
func (c *Cacher) listAndWatch(ctx context.Context) (listed bool, err error) {
	rv, err := c.list(ctx)
	if err != nil {
		return false, err
	}
	retry := watchRetry{window: storageWatchRetryWindow}
	failures := 0 // in this run of failures, for the log
	for {
		var delivered bool
		rv, delivered, err = c.watchFrom(ctx, rv)
		if ctx.Err() != nil {
			return true, err
		}
		if delivered {
			retry.progressed()
			failures = 0
		}
		if err = classifyWatchError(err); !isTransient(err) {
			return true, err
		}
		wait, within := retry.next(c.clock.Now())
		failures++
		c.metrics.StorageWatchRetries.Inc()
		if (errors.Is(err, errStorageSilent) || !within) && !c.feed.silenced.Load() {
			// Not ready until the watch answers: reads get 429, not a
			// state nobody can vouch for. Watchers stay open; they hear
			// nothing they should not.
			why := cachemetrics.NotReadyStorageFailing
			if errors.Is(err, errStorageSilent) {
				why = cachemetrics.NotReadyStorageSilent
			}
			c.goNotReady(why, func() { c.feed.silenced.Store(true) })
			c.logger.Info("Storage watch lost; not ready until it answers, re-opening it from the cache's resourceVersion, watchers kept",
				"resourceVersion", rv, "failingFor", c.clock.Since(retry.first), "err", err)
		} else {
			// A long partition re-opens every 2s: the first failure of a
			// run is logged, the metric counts the rest.
			log := c.logger
			if failures > 1 {
				log = log.V(4)
			}
			log.Info("Storage watch failed; re-opening it from the cache's resourceVersion, watchers kept",
				"resourceVersion", rv, "after", wait, "err", err)
		}
		if wait > 0 {
			select {
			case <-ctx.Done():
				return true, ctx.Err()
			case <-c.clock.After(wait):
			}
		}
	}
}

func (c *Cacher) list(ctx context.Context) (uint64, error) {
	start := c.clock.Now()
	listed, rv, err := c.listStorage(ctx, c.cfg.ResourcePrefix, storage.ListOptions{ResourceVersion: "", Recursive: true, Predicate: storage.Everything})
	if err != nil {
		return 0, fmt.Errorf("listing %v: %w", c.cfg.GroupResource, err)
	}
	objs := make([]any, len(listed))
	for i, o := range listed {
		objs[i] = o
	}

	// The watchers go with the state they started from, under the same lock.
	// The initialization is counted under it too: whoever sees the cache
	// ready sees it counted.
	if err := c.state.Relist(objs, rv, c.clock.Now(), c.terminateAll, func() {
		c.metrics.Initializations.Inc()
		c.metrics.InitDuration.Observe(c.clock.Since(start).Seconds())
	}); err != nil {
		return 0, err
	}
	c.push(objects.Progress(rv))
	c.logger.Info("Watch cache listed", "objects", len(objs), "resourceVersion", rv, "took", c.clock.Since(start))
	c.backfillAfterList(rv)
	return rv, nil
}

// listStorage lists key (the resource's prefix, or one object's key) from
// the wrapped storage with opts and returns its objects and the list's RV.
func (c *Cacher) listStorage(ctx context.Context, key string, opts storage.ListOptions) ([]*objects.Object, uint64, error) {
	list := c.cfg.NewListFunc()
	if err := c.storage.GetList(ctx, key, opts, list); err != nil {
		return nil, 0, err
	}
	listMeta, err := meta.ListAccessor(list)
	if err != nil {
		return nil, 0, err
	}
	rv, err := c.cfg.Versioner.ParseResourceVersion(listMeta.GetResourceVersion())
	if err != nil {
		return nil, 0, err
	}
	// Each item copied out of the list's array: cached objects leave the
	// cache one by one as they change, and an item pointing into the array
	// would keep the whole array (and every dead slot in it) alive until the
	// last of them goes (client-go's reflector does the same).
	items, err := meta.ExtractListWithAlloc(list)
	if err != nil {
		return nil, 0, err
	}
	objs := make([]*objects.Object, 0, len(items))
	for _, item := range items {
		o, err := c.newObject(item)
		if err != nil {
			return nil, 0, err
		}
		objs = append(objs, o)
	}
	return objs, rv, nil
}

// storageWatchOptions is how the cache watches its storage from rv: every
// object, with etcd's progress notifications, which move the cache's RV on
// a quiet resource and are not forwarded to watchers.
func (c *Cacher) storageWatchOptions(rv uint64) storage.ListOptions {
	return storage.ListOptions{
		ResourceVersion: strconv.FormatUint(rv, 10),
		Recursive:       true,
		Predicate: storage.SelectionPredicate{
			Label: labels.Everything(), Field: fields.Everything(), AllowWatchBookmarks: true,
		},
		ProgressNotify: true,
	}
}

// watchFrom follows the storage watch from rv and returns the last RV it
// applied, whether the watch delivered any event or progress, and why it
// stopped.
func (c *Cacher) watchFrom(ctx context.Context, rv uint64) (_ uint64, delivered bool, _ error) {
	opts := c.storageWatchOptions(rv)
	// The cache holds every object a DELETE removes and each update's
	// previous version, so its own watch needs no previous values from
	// etcd (about half of etcd's range work under a watch, kubernetes PR
	// 131862). The backfill's watch keeps them: it reads history the cache
	// never held.
	opts.WatchWithoutPrevKV = c.cfg.StorageWatchWithoutPrevKV
	// Each event stamped with its decode time, for the dispatch latency.
	opts.RecordTimestamps = true
	lost := c.newWatchLost()
	w, err := c.storage.Watch(ctx, c.cfg.ResourcePrefix, opts)
	if err != nil {
		return rv, false, fmt.Errorf("watching %v from %d: %w", c.cfg.GroupResource, rv, err)
	}
	defer w.Stop()
	c.heard(c.clock.Now())
	for {
		select {
		case <-ctx.Done():
			return rv, delivered, ctx.Err()
		case <-lost:
			return rv, delivered, c.feed.watchEnd.reason()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return rv, delivered, errWatchClosed
			}
			c.heard(c.clock.Now())
			switch ev.Type {
			case watch.Error:
				err := apierrors.FromObject(ev.Object)
				return rv, delivered, fmt.Errorf("watching %v from %d: %w", c.cfg.GroupResource, rv, err)
			case watch.Bookmark:
				next, err := c.cfg.Versioner.ObjectResourceVersion(ev.Object)
				if err != nil {
					return rv, delivered, err
				}
				c.metrics.StorageBookmarks.Inc()
				c.state.Advance(next)
				c.push(objects.Progress(next))
				rv = max(rv, next)
				if !delivered {
					c.answered()
				}
				delivered = true
			default:
				next, err := c.apply(ev)
				if err != nil {
					return rv, delivered, err
				}
				rv = next
				if !delivered {
					c.answered()
				}
				delivered = true
			}
		}
	}
}

// answered marks the cache ready again when its storage watch, re-opened
// after a silence, says anything: the state it holds is etcd's again.
func (c *Cacher) answered() {
	if !c.feed.silenced.Load() {
		return
	}
	c.state.ReadyAgainIf(c.clock.Now(), func() bool { return c.feed.silenced.CompareAndSwap(true, false) })
}

// apply records one change in the store and the history and queues it for
// the dispatcher.
func (c *Cacher) apply(ev watch.Event) (uint64, error) {
	now := c.clock.Now()
	e, err := c.newEvent(ev, now)
	if err != nil {
		return 0, err
	}
	cur, rv := e.Cur, e.RV

	// Only this goroutine writes the state, so the object the event
	// replaces can be read before the lock, and the event linked to it:
	// nobody sees the event before the state holds it.
	prev := c.state.Peek(cur.Key)
	if e.Type == watch.Deleted && c.cfg.StorageWatchWithoutPrevKV {
		// Without previous values a DELETE names the object only: clients
		// are sent the cached object at the delete's RV, as etcd's
		// previous value would have been.
		if e.Cur, err = c.deletedObject(prev, cur, rv); err != nil {
			return 0, err
		}
	} else if prev != nil {
		cur.ShareUnchanged(prev)
	}
	c.linkPrev(e, prev)
	forced, err := c.state.Apply(e, now)
	if err != nil {
		return 0, err
	}

	c.metrics.EventsReceived.Inc()
	if forced {
		c.metrics.HistoryForcedEvictions.Inc()
		c.feed.forcedEvictionLog.Do(now, func() {
			c.logger.Info("Watch cache history is at capacity: dropping events younger than the window; clients resuming from them will relist",
				"capacity", c.cfg.HistoryCapacity, "window", c.cfg.EventsHistoryWindow)
		})
	}
	c.push(e)
	return rv, nil
}

// deletedObject is what a DELETE read without etcd's previous value
// carries: the cached object prev, copied at the delete's rv. stub, the
// object the storage watch named, stands when the cache does not hold the
// key, which it always should; that is logged.
func (c *Cacher) deletedObject(prev, stub *objects.Object, rv uint64) (*objects.Object, error) {
	if prev == nil {
		c.logger.Info("Watch cache got a DELETE of an object it does not hold; clients are sent its name only", "key", stub.Key, "resourceVersion", rv)
		return stub, nil
	}
	obj := prev.Obj.DeepCopyObject()
	if err := c.cfg.Versioner.UpdateObject(obj, rv); err != nil {
		return nil, err
	}
	return &objects.Object{Key: prev.Key, Obj: obj, Labels: prev.Labels, Fields: prev.Fields}, nil
}

// newEvent turns a storage watch event into a cached one, all but what it
// changed from (linkPrev).
func (c *Cacher) newEvent(ev watch.Event, now time.Time) (*objects.Event, error) {
	obj := ev.Object
	var decoded int64
	if wrapped, ok := obj.(storage.WatchEventWithRecordTime); ok {
		obj, decoded = wrapped.Unwrap(), wrapped.RecordTime().UnixNano()
	}
	rv, err := c.cfg.Versioner.ObjectResourceVersion(obj)
	if err != nil {
		return nil, err
	}
	cur, err := c.newObject(obj)
	if err != nil {
		return nil, err
	}
	return &objects.Event{Type: ev.Type, RV: rv, Cur: cur, RecordedNanos: now.UnixNano(), DecodedNanos: decoded}, nil
}

// linkPrev records the object e changed (nil for an addition) and the
// trigger values before and after.
func (c *Cacher) linkPrev(e *objects.Event, prev *objects.Object) {
	e.Prev = prev
	if e.Type == watch.Deleted && e.Prev == nil {
		e.Prev = e.Cur
	}
	if c.trigger != nil {
		e.CurTrigger = c.trigger.Value(e.Cur.Obj)
		if e.Prev != nil {
			e.PrevTrigger = c.trigger.Value(e.Prev.Obj)
		} else {
			e.PrevTrigger = e.CurTrigger
		}
	}
}

// push hands an applied event to the dispatcher, waiting when it is behind.
func (c *Cacher) push(e *objects.Event) {
	select {
	case c.incoming <- e:
	case <-c.stopCh:
	}
}

func (c *Cacher) newObject(obj runtime.Object) (*objects.Object, error) {
	key, err := c.cfg.KeyFunc(obj)
	if err != nil {
		return nil, fmt.Errorf("computing the key of %T: %w", obj, err)
	}
	l, f, err := c.cfg.GetAttrsFunc(obj)
	if err != nil {
		return nil, fmt.Errorf("computing the attributes of %s: %w", key, err)
	}
	return &objects.Object{Key: key, Obj: obj, Labels: l, Fields: f}, nil
}
