package cacher

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachemetrics"
	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
)

// eventObjects turns one cached event into what each interested watcher is
// sent, building each shared object at most once per event: the object after
// the change, and, for watchers the change moved out of their selector, the
// object before it at the event's RV (a DELETED).
type eventObjects struct {
	e         *objects.Event
	versioner storage.Versioner
	dropped   func(what string, rv uint64, err error, keysAndValues ...any)
	// dispatchedNanos is when the dispatcher took the event.
	dispatchedNanos int64
	cur             *objects.SharedObject
	movedOut        *objects.SharedObject
	// curFailed and movedOutFailed: building it failed, was reported once,
	// and is not tried again for the next watcher.
	curFailed, movedOutFailed bool
}

func (c *Cacher) objectsOf(e *objects.Event, dispatchedNanos int64) eventObjects {
	return eventObjects{e: e, versioner: c.cfg.Versioner, dropped: c.dropped, dispatchedNanos: dispatchedNanos}
}

func (x *eventObjects) times() objects.EventTimes {
	return objects.EventTimes{Decoded: x.e.DecodedNanos, Received: x.e.RecordedNanos, Dispatched: x.dispatchedNanos}
}

// forSelection is the event as a client whose watcher selects sel of it
// sees it, if at all: an update that moved the object into the selector is
// an ADDED, one that moved it out a DELETED of the old object at the new RV.
func (x *eventObjects) forSelection(sel selection) (watch.Event, bool) {
	e := x.e
	curOK := e.Type != watch.Deleted && sel&selectsCur != 0
	prevOK := sel&selectsPrev != 0
	var typ watch.EventType
	switch {
	case e.Type == watch.Deleted && prevOK:
		typ = watch.Deleted
	case curOK && prevOK:
		typ = watch.Modified
	case curOK:
		typ = watch.Added
	case prevOK:
		return x.movedOutEvent()
	default:
		return watch.Event{}, false
	}
	if x.cur == nil && !x.curFailed {
		s, err := objects.Share(e.Cur.Obj)
		if err != nil {
			x.curFailed = true
			x.dropped(cachemetrics.DropEvent, e.RV, err, "key", e.Cur.Key)
			return watch.Event{}, false
		}
		s.Times = x.times()
		x.cur = s
	}
	if x.curFailed {
		return watch.Event{}, false
	}
	return watch.Event{Type: typ, Object: x.cur.ForWatcher()}, true
}

func (x *eventObjects) movedOutEvent() (watch.Event, bool) {
	if x.movedOut == nil && !x.movedOutFailed {
		old := x.e.Prev.Obj.DeepCopyObject()
		s, err := objects.Share(old)
		if err == nil {
			err = x.versioner.UpdateObject(old, x.e.RV)
		}
		if err != nil {
			x.movedOutFailed = true
			x.dropped(cachemetrics.DropMovedOut, x.e.RV, err, "key", x.e.Prev.Key)
			return watch.Event{}, false
		}
		s.Times = x.times()
		x.movedOut = s
	}
	if x.movedOutFailed {
		return watch.Event{}, false
	}
	return watch.Event{Type: watch.Deleted, Object: x.movedOut.ForWatcher()}, true
}

// bookmarkObject is an empty object of the resource's type at rv, as a
// bookmark carries.
func (c *Cacher) bookmarkObject(rv uint64) (runtime.Object, error) {
	obj := c.cfg.NewFunc()
	if err := c.cfg.Versioner.UpdateObject(obj, rv); err != nil {
		return nil, err
	}
	return obj, nil
}
