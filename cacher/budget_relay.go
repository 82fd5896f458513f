package cacher

import (
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachemetrics"
	"github.com/watchkeeper/watchkeeper/cacher/internal/hub"
	"github.com/watchkeeper/watchkeeper/watchlist"
)

// The cache's side of the memory budget (the decisions are the feed's,
// internal/feed/budget.go). When the resource goes over, the feed lets go
// of the state in one exclusive hold of its lock, and in that hold
// handOverLocked takes every watcher out of the hub and stalls it, as a
// slow one is stalled: it keeps its position and what is queued up to
// what its client is being handed. Its pump, once the client took that,
// asks for more (resumeStalled), and a relayed watcher is fed from an etcd
// watch from its position instead of from the history the cache no longer
// holds: the same events, in the same order, on the same client watch.
// A relayed watcher stays on etcd until it ends, also once the resource is
// cached again: its client's next watch lands on the cache.
//
// A WatchList watcher still waiting for the end of its initial events is
// ended instead, after its client read what was queued: the end bookmark
// says the client holds the state at an RV at or above a floor, and an
// etcd watch from its position says nothing of the kind. Its client lists
// again, from etcd.

// relays are the watchers handed to etcd and their etcd watches. Its lock
// is its own and nothing is taken inside it; handOverLocked takes it inside
// the state's exclusive hold (the order is in doc.go).
type relays struct {
	mu sync.Mutex
	m  map[*hub.Watcher]*relay
}

// relay is one relayed watcher's etcd watch, opened on its first feed,
// and an event read past the last chunk (an error or the watch's end,
// after events), which only the watcher's pump touches.
type relay struct {
	src     watch.Interface
	pending *watch.Event
	ended   bool
}

func (r *relays) add(w *hub.Watcher) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[*hub.Watcher]*relay{}
	}
	r.m[w] = &relay{}
}

func (r *relays) get(w *hub.Watcher) (*relay, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rl, ok := r.m[w]
	return rl, ok
}

func (r *relays) has(w *hub.Watcher) bool {
	_, ok := r.get(w)
	return ok
}

// setSource records w's etcd watch; false, with src stopped, when w was
// removed meanwhile.
func (r *relays) setSource(w *hub.Watcher, src watch.Interface) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	rl, ok := r.m[w]
	if !ok {
		src.Stop()
		return false
	}
	rl.src = src
	return true
}

// remove forgets w and stops its etcd watch, which ends a feed waiting on
// it; false when w was not relayed.
func (r *relays) remove(w *hub.Watcher) bool {
	r.mu.Lock()
	rl, ok := r.m[w]
	delete(r.m, w)
	r.mu.Unlock()
	if ok && rl.src != nil {
		rl.src.Stop()
	}
	return ok
}

func (r *relays) all() []*hub.Watcher {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*hub.Watcher, 0, len(r.m))
	for w := range r.m {
		out = append(out, w)
	}
	return out
}

func (r *relays) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
}

// handOverLocked is the feed's HandOver, in the exclusive hold of the
// state's lock that lets go of the state: every watcher leaves the hub and
// is relayed from etcd, or, waiting for its initial events' end, ended.
func (c *Cacher) handOverLocked() {
	now := c.clock.Now().UnixNano()
	relayed, ended := 0, 0
	for _, w := range c.hub.RemoveAll() {
		c.left(w)
		if w.ListState() == watchlist.WaitingForBookmark {
			w.Drain()
			ended++
			continue
		}
		c.relays.add(w)
		// One stalled already keeps its position and its pump.
		w.Stall(now)
		relayed++
	}
	c.metrics.Budget.HandedOver[cachemetrics.HandedRelayed].Add(float64(relayed))
	c.metrics.Budget.HandedOver[cachemetrics.HandedEnded].Add(float64(ended))
	if relayed+ended > 0 {
		c.logger.Info("Handed the watches of a resource over its memory budget to etcd",
			"relayed", relayed, "endedWaitingForInitialEvents", ended)
	}
}

// feedFromStorage is a relayed watcher's feed, on its pump, once its
// client took everything queued: the next events of its etcd watch (opened
// from its position the first time), as many as have arrived up to a
// catch-up chunk, waiting for the first. An error from etcd (a 410 for a
// position etcd compacted) ends the watcher once its client read it; the
// etcd watch's end ends it after what is queued, and its client resumes.
func (c *Cacher) feedFromStorage(w *hub.Watcher) {
	pos, ok := w.Position()
	if !ok {
		return // ending, or not drained yet
	}
	rl, ok := c.relays.get(w)
	if !ok {
		return
	}
	if rl.src == nil {
		pred := w.Pred
		if pred.GetAttrs == nil {
			// The cache selects with its own; etcd's watch needs one.
			pred.GetAttrs = c.cfg.GetAttrsFunc
		}
		src, err := c.storage.Watch(c.life.ctx, w.Key, storage.ListOptions{
			ResourceVersion: strconv.FormatUint(pos, 10), Recursive: w.Recursive,
			Predicate: pred, ProgressNotify: w.Bookmarks,
		})
		if err != nil {
			ev := errorEvent(err)
			c.endRelay(w, &ev, err)
			return
		}
		if !c.relays.setSource(w, src) {
			return
		}
	}
	if rl.pending != nil || rl.ended {
		c.endRelay(w, rl.pending, nil)
		return
	}
	var (
		chunk   hub.Chunk
		through uint64
		n       int
	)
	limit := hub.CatchUpChunk(c.cfg.WatcherBuffer)
	take := func(ev watch.Event, open bool) bool {
		if !open {
			rl.ended = true
			return false
		}
		if ev.Type == watch.Error {
			rl.pending = &ev
			return false
		}
		rv, err := c.cfg.Versioner.ObjectResourceVersion(ev.Object)
		if err != nil {
			c.dropped(cachemetrics.DropEvent, 0, err, "relayedFromStorage", true)
			return true
		}
		chunk.Add(ev, rv)
		through, n = rv, n+1
		return true
	}
	select {
	case ev, open := <-rl.src.ResultChan():
		if !take(ev, open) {
			c.endRelay(w, rl.pending, nil)
			return
		}
	case <-w.Closed():
		c.relays.remove(w)
		return
	case <-c.life.stopCh:
		c.relays.remove(w)
		w.Terminate()
		return
	}
more:
	for n < limit {
		select {
		case ev, open := <-rl.src.ResultChan():
			if !take(ev, open) {
				break more
			}
		default:
			break more
		}
	}
	if n > 0 {
		w.Refill(chunk, through)
	}
}

// endRelay ends a relayed watcher: with ev (an error) once its client read
// it, or, ev nil, once it read what is queued.
func (c *Cacher) endRelay(w *hub.Watcher, ev *watch.Event, err error) {
	c.relays.remove(w)
	if ev == nil {
		w.Drain()
		return
	}
	w.Expire(*ev, c.clock.Now().UnixNano())
	c.logger.V(2).Info("A watch relayed from etcd ended with an error", "key", w.Key, "err", err, "event", ev.Object)
}
