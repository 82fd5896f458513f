package hub

import (
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachemetrics"
	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
)

// EventObjects turns one cached event into what each interested watcher is
// sent, building each shared object at most once per event: the object after
// the change, and, for watchers the change moved out of their selector, the
// object before it at the event's RV (a DELETED).
type EventObjects struct {
	Event     *objects.Event
	Versioner storage.Versioner
	Dropped   func(what string, rv uint64, err error, keysAndValues ...any)
	// DispatchedNanos is when the dispatcher took the event.
	DispatchedNanos int64
	cur             *objects.SharedObject
	movedOut        *objects.SharedObject
	// curFailed and movedOutFailed: building it failed, was reported once,
	// and is not tried again for the next watcher.
	curFailed, movedOutFailed bool
}

func (x *EventObjects) times() objects.EventTimes {
	return objects.EventTimes{Decoded: x.Event.DecodedNanos, Received: x.Event.RecordedNanos, Dispatched: x.DispatchedNanos}
}

// ForSelection is the event as a client whose watcher selects sel of it
// sees it, if at all: an update that moved the object into the selector is
// an ADDED, one that moved it out a DELETED of the old object at the new RV.
func (x *EventObjects) ForSelection(sel selection) (watch.Event, bool) {
	e := x.Event
	curOK := e.Type != watch.Deleted && sel&SelectsCur != 0
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
		obj, err := e.Cur.Get()
		var s *objects.SharedObject
		if err == nil {
			s, err = objects.Share(obj)
		}
		if err != nil {
			x.curFailed = true
			x.Dropped(cachemetrics.DropEvent, e.RV, err, "key", e.Cur.Key)
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

func (x *EventObjects) movedOutEvent() (watch.Event, bool) {
	if x.movedOut == nil && !x.movedOutFailed {
		old, err := x.Event.Prev.Copy()
		var s *objects.SharedObject
		if err == nil {
			s, err = objects.Share(old)
		}
		if err == nil {
			err = x.Versioner.UpdateObject(old, x.Event.RV)
		}
		if err != nil {
			x.movedOutFailed = true
			x.Dropped(cachemetrics.DropMovedOut, x.Event.RV, err, "key", x.Event.Prev.Key)
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
