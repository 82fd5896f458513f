package cacher

import (
	"context"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"

	"github.com/watchkeeper/watchkeeper/watchlist"
)

// resultBuffer is how many converted events wait for the client; what the
// client had not read when it called Stop is still delivered.
const resultBuffer = 10

// watcher is one client's watch. The dispatcher writes to input; the
// watcher's goroutine converts what it reads and writes to result.
type watcher struct {
	c         *Cacher
	pred      storage.SelectionPredicate
	key       string // exact key, or prefix when recursive
	recursive bool
	deadline  time.Time
	// triggerValue is the trigger field's value the watcher's selector pins,
	// when triggered; see watcherSet.
	triggerValue string
	triggered    bool
	// bookmarks is whether the client asked for bookmarks at all.
	bookmarks bool

	// startRV is the RV of the state the client starts from: live events at
	// or below it are already covered by the initial events and are dropped.
	startRV uint64

	input  chan *event
	result chan watch.Event
	done   chan struct{}
	once   sync.Once

	// mu guards the WatchList tracker, shared by the dispatcher (which offers
	// bookmarks) and the watcher's goroutine (which sends them).
	mu      sync.Mutex
	tracker watchlist.Tracker
}

var _ watch.Interface = (*watcher)(nil)

// ResultChan implements watch.Interface.
func (w *watcher) ResultChan() <-chan watch.Event { return w.result }

// Stop implements watch.Interface. Events already converted stay readable.
func (w *watcher) Stop() { w.c.forgetWatcher(w, false) }

// stop ends the watcher's goroutine without delivering what is queued.
func (w *watcher) stop() { w.once.Do(func() { close(w.done) }) }

// interested is whether e concerns this watcher: its key, and its selector
// on the object either before or after the change.
func (w *watcher) interested(e *event) bool {
	o := e.cur
	if o == nil {
		o = e.prev
	}
	if w.recursive {
		if !strings.HasPrefix(o.key, w.key) {
			return false
		}
	} else if o.key != w.key {
		return false
	}
	return matches(w.pred, e.cur) || matches(w.pred, e.prev)
}

// floorReached reports whether the WatchList bookmark floor has been met,
// for the bookmark policy.
func (w *watcher) floorReached() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.tracker.FloorReached()
}

// offerBookmark queues a bookmark at rv unless the watcher's floor refuses
// it or its queue is full; a full queue means events are flowing, which is
// proof of life enough.
func (w *watcher) offerBookmark(b *event) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if b.rv < w.tracker.Floor() {
		return false
	}
	select {
	case w.input <- b:
		if before := w.tracker.State(); w.tracker.Accept(b.rv) && w.tracker.State() != before {
			w.c.metrics.watcherMoved(before, w.tracker.State())
		}
		return true
	default:
		return false
	}
}

// run delivers the initial events, then live events, until the watcher is
// stopped or its input is closed (a graceful close after a slow client).
func (w *watcher) run(ctx context.Context, initial []watch.Event, endBookmark *event) {
	defer w.c.wg.Done()
	defer close(w.result)
	// The request's context ending (client gone, deadline) ends the watch.
	stopOnCancel := context.AfterFunc(ctx, func() { w.c.forgetWatcher(w, false) })
	defer stopOnCancel()
	lastRV := w.startRV
	for _, e := range initial {
		if !w.send(ownCopy(e)) {
			return
		}
	}
	if endBookmark != nil && !w.sendBookmark(endBookmark, &lastRV) {
		return
	}
	signalInitialized(ctx)
	for {
		select {
		case <-w.done:
			return
		case e, ok := <-w.input:
			if !ok {
				return
			}
			if e.isProgress() {
				if !w.sendBookmark(e, &lastRV) {
					return
				}
				continue
			}
			if e.rv <= lastRV {
				continue
			}
			lastRV = e.rv
			if out, ok := w.convert(e); ok && !w.send(ownCopy(out)) {
				return
			}
		}
	}
}

// convert turns a cached event into what this watcher's client sees: an
// update that moved the object into the selector is an ADDED, one that moved
// it out a DELETED of the old object at the new RV.
func (w *watcher) convert(e *event) (watch.Event, bool) {
	curOK := e.typ != watch.Deleted && matches(w.pred, e.cur)
	prevOK := matches(w.pred, e.prev)
	switch {
	case e.typ == watch.Deleted && prevOK:
		return watch.Event{Type: watch.Deleted, Object: e.cur.obj}, true
	case curOK && prevOK:
		return watch.Event{Type: watch.Modified, Object: e.cur.obj}, true
	case curOK:
		return watch.Event{Type: watch.Added, Object: e.cur.obj}, true
	case prevOK:
		old := e.prev.obj.DeepCopyObject()
		if err := w.c.versioner.UpdateObject(old, e.rv); err != nil {
			return watch.Event{}, false
		}
		return watch.Event{Type: watch.Deleted, Object: old}, true
	default:
		return watch.Event{}, false
	}
}

// sendBookmark sends a bookmark at the greater of b's RV and the last RV the
// client saw, so a bookmark never takes a client backwards; the first one at
// or above the WatchList floor carries the initial-events-end marker.
func (w *watcher) sendBookmark(b *event, lastRV *uint64) bool {
	rv := max(b.rv, *lastRV)
	obj := w.c.newFunc()
	if err := w.c.versioner.UpdateObject(obj, rv); err != nil {
		return true
	}
	w.mu.Lock()
	marked, err := w.tracker.Sent(obj)
	if marked {
		w.c.metrics.watcherMoved(watchlist.BookmarkReceived, watchlist.BookmarkSent)
	}
	w.mu.Unlock()
	if err != nil {
		// A bookmark below the floor never reaches here; nothing to send.
		return true
	}
	*lastRV = rv
	return w.send(watch.Event{Type: watch.Bookmark, Object: obj})
}

// ownCopy gives the client its own copy of a cached object. Every watcher
// of an event would otherwise get the same pointer, and the apiserver's
// encoder writes the object's kind while it encodes, so two watches encoding
// one object at once race (the race detector saw it over HTTP).
func ownCopy(e watch.Event) watch.Event {
	e.Object = e.Object.DeepCopyObject()
	return e
}

func (w *watcher) send(e watch.Event) bool {
	// The cache stopping ends even a watcher that is draining gracefully
	// towards a client that does not read, so Stop never waits on a client.
	select {
	case <-w.done:
		return false
	case <-w.c.stopCh:
		return false
	default:
	}
	select {
	case w.result <- e:
		return true
	case <-w.done:
		return false
	case <-w.c.stopCh:
		return false
	}
}

// initialAdded turns cached objects into the ADDED events a watch starting
// from a state begins with.
func initialAdded(objs []*object, pred storage.SelectionPredicate) []watch.Event {
	out := make([]watch.Event, 0, len(objs))
	for _, o := range objs {
		if matches(pred, o) {
			out = append(out, watch.Event{Type: watch.Added, Object: o.obj})
		}
	}
	return out
}
