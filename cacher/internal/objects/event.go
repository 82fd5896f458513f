package objects

import (
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
)

// Event is one change as the cache saw it. prev is the object before the
// change (nil for an addition), so a watcher whose selector the object moved
// into or out of sees an ADDED or DELETED rather than a MODIFIED.
type Event struct {
	Type watch.EventType
	RV   uint64
	Cur  *Object
	Prev *Object
	// CurTrigger and prevTrigger are the trigger field's values before and
	// after the change, when the resource has a trigger.
	CurTrigger, PrevTrigger string
	// recorded is when the cache applied the event, for the history window.
	RecordedNanos int64
	// DecodedNanos is when the etcd3 store decoded it, 0 if not stamped.
	DecodedNanos int64
}

// Progress marks that the cache has seen everything up to rv without an
// event: a storage-layer bookmark. It moves the dispatcher's resourceVersion
// and is never forwarded as such.
func Progress(rv uint64) *Event { return &Event{Type: watch.Bookmark, RV: rv} }

// IsProgress is whether e is a progress notification (Progress), not a
// change.
func (e *Event) IsProgress() bool { return e.Type == watch.Bookmark }

// matches reports whether the object (cur, or prev for the side it left)
// passes the predicate: its labels and fields, then its shard.
func matches(pred storage.SelectionPredicate, o *Object) bool {
	if !MatchesAttrs(pred, o) {
		return false
	}
	if pred.ShardSelector == nil {
		return true
	}
	obj, err := o.Get()
	if err != nil {
		return false
	}
	ok, err := pred.MatchesSharding(obj)
	return err == nil && ok
}

// MatcherFor is matches for a walk over many objects: the shard selector
// compiled once (ShardFilter) rather than formatted and compared as text
// per object. A selector that does not compile is left to upstream's.
func MatcherFor(pred storage.SelectionPredicate) func(*Object) bool {
	f, err := NewShardFilter(pred)
	if err != nil || f == nil {
		return func(o *Object) bool { return matches(pred, o) }
	}
	return func(o *Object) bool { return MatchesAttrs(pred, o) && f.Selects(o) }
}

// MatchesAttrs is matches without the shard: a watcher checks its own,
// compiled (ShardFilter).
func MatchesAttrs(pred storage.SelectionPredicate, o *Object) bool {
	if o == nil {
		return false
	}
	if pred.Label != nil && !pred.Label.Empty() && !pred.Label.Matches(o.Labels) {
		return false
	}
	if pred.Field != nil && !pred.Field.Empty() && !pred.Field.Matches(o.Fields) {
		return false
	}
	return true
}
