package cacher

import (
	"context"

	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachemetrics"
	"github.com/watchkeeper/watchkeeper/cacher/internal/hub"
	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
	"github.com/watchkeeper/watchkeeper/cacher/internal/state"
)

// A watch that starts from the state (a WatchList, or a watch from RV "0")
// is sent that state as ADDED events, all of one RV. KEP-3157 clients count
// on it: the initial events are ADDED only, and a WatchList's end bookmark
// closes them at the state's RV. The state is read outside the cache's
// exclusive lock, so the cache may apply events while it is being built;
// those are folded into it (fold) before the watcher is registered, never
// sent after it as MODIFIED or DELETED of objects the client was just given.

// initialState is the state a watch starts from, as ADDED events, the
// objects they carry (aligned with them), and the RV it was read at. The
// cache's exclusive lock is held only to take a copy-on-write clone of the
// ordered objects (O(1)), or for an index lookup when the selector pins an
// indexed field (spec.nodeName for a kubelet's pods: only that node's pods
// are read), or for a single key; the walk under the prefix, the selector
// matches and the shared objects are built outside it, so an informer start
// storm does not hold up the reflector, lists and Gets for the length of a
// full scan each.
func (c *Cacher) initialState(ctx context.Context, key string, opts storage.ListOptions) ([]watch.Event, []*objects.Object, uint64, error) {
	objs, rv, since, ok := c.state.StartingState(ctx, key, opts)
	if !ok {
		return nil, nil, 0, notReadyError(c.clock.Now(), since)
	}
	events, objs := c.initialAdded(objs, opts.Predicate, rv)
	return events, objs, rv, nil
}

// initialAdded turns cached objects, the state at rv sorted by key, into the
// ADDED events a watch starting from it begins with, and returns the objects
// sent, aligned with the events (objs is filtered in place: every caller
// passes a slice of its own). No copy of an object is made: the client's
// handle copies on its first change.
func (c *Cacher) initialAdded(objs []*objects.Object, pred storage.SelectionPredicate, rv uint64) ([]watch.Event, []*objects.Object) {
	out := make([]watch.Event, 0, len(objs))
	sent := objs[:0]
	selected := objects.MatcherFor(pred)
	for _, o := range objs {
		if !selected(o) {
			continue
		}
		if ev, ok := c.addedEvent(o, rv); ok {
			out = append(out, ev)
			sent = append(sent, o)
		}
	}
	return out, sent
}

func (c *Cacher) addedEvent(o *objects.Object, rv uint64) (watch.Event, bool) {
	obj, err := o.Get()
	var s *objects.SharedObject
	if err == nil {
		s, err = objects.Share(obj)
	}
	if err != nil {
		c.dropped(cachemetrics.DropInitialEvent, rv, err, "key", o.Key)
		return watch.Event{}, false
	}
	return watch.Event{Type: watch.Added, Object: s.ForWatcher()}, true
}

// fold brings a state read earlier (events and the objects they carry,
// sorted by key) up to the newest of changes, the events the cache applied
// since, oldest first, as w sees them: an update replaces its object's
// ADDED, a deletion or a move out of w's selector drops it, a creation or a
// move into the selector adds one in key order. The result is the state at
// the newest change's RV, as ADDED events. It costs one pass over changes,
// and one over the state only when a change concerns w.
func (c *Cacher) fold(events []watch.Event, objs []*objects.Object, w *hub.Watcher, changes []*objects.Event) []watch.Event {
	// now is each changed key's object as w sees it after the changes, nil
	// where w sees none.
	var now map[string]*objects.Object
	for _, e := range changes {
		sel := w.Selects(e)
		if sel == 0 {
			// Outside w's key, or outside its selector before and after:
			// w's state has no object for it either way.
			continue
		}
		if now == nil {
			now = make(map[string]*objects.Object)
		}
		if e.Type != watch.Deleted && sel&hub.SelectsCur != 0 {
			now[e.Cur.Key] = e.Cur
		} else {
			now[e.Prev.Key] = nil
		}
	}
	if now == nil {
		return events
	}
	// One merge of two lists sorted by key: the state, and the objects w
	// sees after the changes.
	upserts := make([]*objects.Object, 0, len(now))
	for _, o := range now {
		if o != nil {
			upserts = append(upserts, o)
		}
	}
	state.SortObjects(upserts)
	rv := changes[len(changes)-1].RV
	out := make([]watch.Event, 0, len(events)+len(upserts))
	i, j := 0, 0
	for i < len(objs) || j < len(upserts) {
		if j < len(upserts) && (i == len(objs) || upserts[j].Key <= objs[i].Key) {
			if i < len(objs) && objs[i].Key == upserts[j].Key {
				i++ // its newer version replaces it
			}
			if ev, ok := c.addedEvent(upserts[j], rv); ok {
				out = append(out, ev)
			}
			j++
			continue
		}
		// A changed key still here was deleted for w: a replaced one went
		// with its upsert above.
		if _, changed := now[objs[i].Key]; !changed {
			out = append(out, events[i])
		}
		i++
	}
	return out
}
