package feed

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
func (f *Feed) reflectLoop() {
	defer f.wg.Done()
	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(context.Background(), f.watchMetadata))
	defer cancel()
	go func() {
		select {
		case <-f.stopCh:
			cancel()
		case <-ctx.Done():
		}
	}()

	backoff := initialBackoff
	for {
		listed, err := f.listAndWatch(ctx)
		// Whatever comes next (a relist, or etcd serving the resource over
		// its budget) the cached objects go: their siblings with them.
		f.siblings.reset()
		if f.stopping() {
			return
		}
		if errors.Is(err, errOverBudget) {
			if !f.serveFromStorage(ctx) {
				return
			}
			backoff = initialBackoff
			continue
		}
		if listed {
			backoff = initialBackoff
		}
		f.metrics.InitializationErrors.Inc()
		f.logger.Error(err, "Watch cache lost its watch; relisting", "backoff", backoff)
		f.GoNotReady(cachemetrics.NotReadyRelist, f.endWatchers)
		select {
		case <-f.stopCh:
			return
		case <-f.clock.After(wait.Jitter(backoff, 0.5)):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

func (f *Feed) stopping() bool { return closed(f.stopCh) }

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
func (f *Feed) listAndWatch(ctx context.Context) (listed bool, err error) {
	rv, err := f.list(ctx)
	if err != nil {
		return false, err
	}
	if err := f.measureBudget(ctx); err != nil {
		return true, err
	}
	retry := watchRetry{window: StorageWatchRetryWindow}
	failures := 0 // in this run of failures, for the log
	for {
		var delivered bool
		rv, delivered, err = f.watchFrom(ctx, rv)
		if ctx.Err() != nil {
			return true, err
		}
		if delivered {
			retry.progressed()
			failures = 0
		}
		if errors.Is(err, errOverBudget) {
			return true, err
		}
		if err = classifyWatchError(err); !isTransient(err) {
			return true, err
		}
		wait, within := retry.next(f.clock.Now())
		failures++
		f.metrics.StorageWatchRetries.Inc()
		if (errors.Is(err, errStorageSilent) || !within) && !f.silenced.Load() {
			// Not ready until the watch answers: reads get 429, not a
			// state nobody can vouch for. Watchers stay open; they hear
			// nothing they should not.
			why := cachemetrics.NotReadyStorageFailing
			if errors.Is(err, errStorageSilent) {
				why = cachemetrics.NotReadyStorageSilent
			}
			f.GoNotReady(why, func() { f.silenced.Store(true) })
			f.logger.Info("Storage watch lost; not ready until it answers, re-opening it from the cache's resourceVersion, watchers kept",
				"resourceVersion", rv, "failingFor", f.clock.Since(retry.first), "err", err)
		} else {
			// A long partition re-opens every 2s: the first failure of a
			// run is logged, the metric counts the rest.
			log := f.logger
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
			case <-f.clock.After(wait):
			}
		}
	}
}

func (f *Feed) list(ctx context.Context) (uint64, error) {
	start := f.clock.Now()
	var share func([]runtime.Object)
	if f.cfg.ShareSiblings {
		share = func(items []runtime.Object) {
			f.siblings.listed(items, listWorkerLimit())
		}
	}
	listed, rv, err := f.listStorage(ctx, f.cfg.ResourcePrefix, storage.ListOptions{ResourceVersion: "", Recursive: true, Predicate: storage.Everything}, share)
	if err != nil {
		return 0, fmt.Errorf("listing %v: %w", f.cfg.GroupResource, err)
	}
	objs := make([]any, len(listed))
	for i, o := range listed {
		objs[i] = o
	}

	// The watchers go with the state they started from, under the same lock.
	// The initialization is counted under it too: whoever sees the cache
	// ready sees it counted.
	if err := f.state.Relist(objs, rv, f.clock.Now(), f.endWatchers, func() {
		f.cachedAgain()
		f.metrics.Initializations.Inc()
		f.metrics.InitDuration.Observe(f.clock.Since(start).Seconds())
	}); err != nil {
		return 0, err
	}
	f.push(objects.Progress(rv))
	f.logger.Info("Watch cache listed", "objects", len(objs), "resourceVersion", rv, "took", f.clock.Since(start))
	f.backfillAfterList(rv)
	return rv, nil
}

// listStorage lists key (the resource's prefix, or one object's key) from
// the wrapped storage with opts and returns its objects and the list's RV;
// share, if set, sees the listed objects before their attributes are taken
// (newObject says why).
func (f *Feed) listStorage(ctx context.Context, key string, opts storage.ListOptions, share func([]runtime.Object)) ([]*objects.Object, uint64, error) {
	list := f.cfg.NewListFunc()
	if err := f.storage.GetList(ctx, key, opts, list); err != nil {
		return nil, 0, err
	}
	listMeta, err := meta.ListAccessor(list)
	if err != nil {
		return nil, 0, err
	}
	rv, err := f.cfg.Versioner.ParseResourceVersion(listMeta.GetResourceVersion())
	if err != nil {
		return nil, 0, err
	}
	// Each item copied out of the list's array: cached objects leave the
	// cache one by one as they change, and an item pointing into the array
	// would keep the whole array (and every dead slot in it) alive until the
	// last of them goes (client-go's reflector does the same). In compact
	// form no item is kept, only its bytes: the array goes with the list,
	// and a copy would be one more of every object for nothing.
	extract := meta.ExtractListWithAlloc
	if f.cfg.Compactor != nil {
		extract = meta.ExtractList
	}
	items, err := extract(list)
	if err != nil {
		return nil, 0, err
	}
	if share != nil {
		share(items)
	}
	objs, err := f.listedObjects(items)
	if err != nil {
		return nil, 0, err
	}
	return objs, rv, nil
}

// storageWatchOptions is how the cache watches its storage from rv: every
// object, with etcd's progress notifications, which move the cache's RV on
// a quiet resource and are not forwarded to watchers.
func (f *Feed) storageWatchOptions(rv uint64) storage.ListOptions {
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
func (f *Feed) watchFrom(ctx context.Context, rv uint64) (_ uint64, delivered bool, _ error) {
	opts := f.storageWatchOptions(rv)
	// The cache holds every object a DELETE removes and each update's
	// previous version, so its own watch needs no previous values from
	// etcd (about half of etcd's range work under a watch, kubernetes PR
	// 131862). The backfill's watch keeps them: it reads history the cache
	// never held.
	opts.WatchWithoutPrevKV = f.cfg.StorageWatchWithoutPrevKV
	// Each event stamped with its decode time, for the dispatch latency.
	opts.RecordTimestamps = true
	lost := f.newWatchLost()
	w, err := f.storage.Watch(ctx, f.cfg.ResourcePrefix, opts)
	if err != nil {
		return rv, false, fmt.Errorf("watching %v from %d: %w", f.cfg.GroupResource, rv, err)
	}
	defer w.Stop()
	f.heard(f.clock.Now())
	measure, stopMeasuring := f.budgetTicker()
	defer stopMeasuring()
	for {
		select {
		case <-ctx.Done():
			return rv, delivered, ctx.Err()
		case <-lost:
			return rv, delivered, f.watchEnd.reason()
		case <-measure:
			if err := f.measureBudget(ctx); err != nil {
				return rv, delivered, err
			}
		case ev, ok := <-w.ResultChan():
			if !ok {
				return rv, delivered, errWatchClosed
			}
			f.heard(f.clock.Now())
			switch ev.Type {
			case watch.Error:
				err := apierrors.FromObject(ev.Object)
				return rv, delivered, fmt.Errorf("watching %v from %d: %w", f.cfg.GroupResource, rv, err)
			case watch.Bookmark:
				next, err := f.cfg.Versioner.ObjectResourceVersion(ev.Object)
				if err != nil {
					return rv, delivered, err
				}
				f.metrics.StorageBookmarks.Inc()
				if took, ok := f.answers.answered(f.clock.Now()); ok {
					f.metrics.ProgressAnswer.Observe(took.Seconds())
				}
				f.state.Advance(next)
				f.push(objects.Progress(next))
				rv = max(rv, next)
				if !delivered {
					f.answered()
				}
				delivered = true
			default:
				next, err := f.apply(ev)
				if err != nil {
					return rv, delivered, err
				}
				rv = next
				if !delivered {
					f.answered()
				}
				delivered = true
			}
		}
	}
}

// answered marks the cache ready again when its storage watch, re-opened
// after a silence, says anything: the state it holds is etcd's again.
func (f *Feed) answered() {
	if !f.silenced.Load() {
		return
	}
	f.state.ReadyAgainIf(f.clock.Now(), func() bool { return f.silenced.CompareAndSwap(true, false) })
}

// apply records one change in the store and the history and queues it for
// the dispatcher.
func (f *Feed) apply(ev watch.Event) (uint64, error) {
	now := f.clock.Now()
	// Only this goroutine writes the state, so the object the event
	// replaces can be read before the lock, and the event linked to it:
	// nobody sees the event before the state holds it.
	var prev *objects.Object
	e, err := f.newEvent(ev, now, func(key string, obj runtime.Object) {
		prev = f.state.Peek(key)
		if prev == nil && ev.Type != watch.Deleted && f.cfg.ShareSiblings {
			f.siblings.added(obj)
		}
	})
	if err != nil {
		return 0, err
	}
	cur, rv := e.Cur, e.RV
	if e.Type == watch.Deleted && f.cfg.StorageWatchWithoutPrevKV {
		// Without previous values a DELETE names the object only: clients
		// are sent the cached object at the delete's RV, as etcd's
		// previous value would have been.
		if e.Cur, err = f.deletedObject(prev, cur, rv); err != nil {
			return 0, err
		}
	} else if prev != nil {
		cur.ShareUnchanged(prev)
	}
	if f.cfg.ShareSiblings && prev != nil {
		if e.Type == watch.Deleted {
			f.siblings.deleted(prev.Decoded())
		} else {
			f.siblings.replaced(prev.Decoded(), cur.Decoded())
		}
	}
	f.linkPrev(e, prev)
	forced, err := f.state.Apply(e, now)
	if err != nil {
		return 0, err
	}

	f.metrics.EventsReceived.Inc()
	if forced {
		f.metrics.HistoryForcedEvictions.Inc()
		f.forcedEvictionLog.Do(now, func() {
			f.logger.Info("Watch cache history is at capacity: dropping events younger than the window; clients resuming from them will relist",
				"capacity", f.cfg.HistoryCapacity, "window", f.cfg.EventsHistoryWindow)
		})
	}
	f.push(e)
	return rv, nil
}

// deletedObject is what a DELETE read without etcd's previous value
// carries: the cached object prev, copied at the delete's rv. stub, the
// object the storage watch named, stands when the cache does not hold the
// key, which it always should; that is logged.
func (f *Feed) deletedObject(prev, stub *objects.Object, rv uint64) (*objects.Object, error) {
	if prev == nil {
		f.logger.Info("Watch cache got a DELETE of an object it does not hold; clients are sent its name only", "key", stub.Key, "resourceVersion", rv)
		return stub, nil
	}
	obj, err := prev.Copy()
	if err != nil {
		return nil, err
	}
	if err := f.cfg.Versioner.UpdateObject(obj, rv); err != nil {
		return nil, err
	}
	return f.hold(prev.Key, obj, prev.Labels, prev.Fields)
}

// newEvent turns a storage watch event into a cached one, all but what it
// changed from (linkPrev); share, if set, sees its object first
// (newObject).
func (f *Feed) newEvent(ev watch.Event, now time.Time, share func(string, runtime.Object)) (*objects.Event, error) {
	obj := ev.Object
	var decoded int64
	if wrapped, ok := obj.(storage.WatchEventWithRecordTime); ok {
		obj, decoded = wrapped.Unwrap(), wrapped.RecordTime().UnixNano()
	}
	rv, err := f.cfg.Versioner.ObjectResourceVersion(obj)
	if err != nil {
		return nil, err
	}
	cur, err := f.newObject(obj, share)
	if err != nil {
		return nil, err
	}
	return &objects.Event{Type: ev.Type, RV: rv, Cur: cur, RecordedNanos: now.UnixNano(), DecodedNanos: decoded}, nil
}

// linkPrev records the object e changed (nil for an addition) and the
// trigger values before and after.
func (f *Feed) linkPrev(e *objects.Event, prev *objects.Object) {
	e.Prev = prev
	if e.Type == watch.Deleted && e.Prev == nil {
		e.Prev = e.Cur
	}
	if f.trigger != nil {
		e.CurTrigger = f.trigger.Of(e.Cur)
		if e.Prev != nil {
			e.PrevTrigger = f.trigger.Of(e.Prev)
		} else {
			e.PrevTrigger = e.CurTrigger
		}
	}
}

// push hands an applied event to the dispatcher, waiting when it is behind.
func (f *Feed) push(e *objects.Event) {
	select {
	case f.incoming <- e:
	case <-f.stopCh:
	}
}

// NewObject is the cache's object for obj: its key, labels and fields.
func (f *Feed) NewObject(obj runtime.Object) (*objects.Object, error) { return f.newObject(obj, nil) }

// newObject is NewObject with share, if set, called with the key before
// the attributes are taken: it may point obj's parts at a sibling's
// (siblings.go), and the labels and fields then point at the shared parts
// too, not at obj's own copies.
func (f *Feed) newObject(obj runtime.Object, share func(key string, obj runtime.Object)) (*objects.Object, error) {
	key, err := f.cfg.KeyFunc(obj)
	if err != nil {
		return nil, fmt.Errorf("computing the key of %T: %w", obj, err)
	}
	if share != nil {
		share(key, obj)
	}
	lbls, flds, err := f.cfg.GetAttrsFunc(obj)
	if err != nil {
		return nil, fmt.Errorf("computing the attributes of %s: %w", key, err)
	}
	return f.hold(key, obj, lbls, flds)
}

// hold is obj as the cache holds it: decoded, or in compact form.
func (f *Feed) hold(key string, obj runtime.Object, lbls labels.Set, flds fields.Set) (*objects.Object, error) {
	if f.cfg.Compactor != nil {
		return f.cfg.Compactor.Hold(key, obj, lbls, flds)
	}
	return objects.NewDecoded(key, obj, lbls, flds), nil
}
