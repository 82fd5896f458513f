package cacher

import (
	"maps"

	"github.com/watchkeeper/watchkeeper/cacher/internal/versions"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
)

// object is a cached object with the attributes selectors look at, computed
// once when it enters the cache instead of once per watcher.
type object struct {
	key    string
	obj    runtime.Object
	labels labels.Set
	fields fields.Set
}

// shareUnchanged makes o, a new version of prev, hold prev's key and, where
// they did not change, its labels and fields, and the parts of its object
// (versions.Share): the history keeps both versions, and most updates (a
// status, a spec field) leave the rest as it was. None is written once
// made.
func (o *object) shareUnchanged(prev *object) {
	o.key = prev.key
	versions.Share(o.obj, prev.obj)
	if maps.Equal(o.labels, prev.labels) {
		o.labels = prev.labels
	}
	if maps.Equal(o.fields, prev.fields) {
		o.fields = prev.fields
	}
}

// event is one change as the cache saw it. prev is the object before the
// change (nil for an addition), so a watcher whose selector the object moved
// into or out of sees an ADDED or DELETED rather than a MODIFIED.
type event struct {
	typ  watch.EventType
	rv   uint64
	cur  *object
	prev *object
	// curTrigger and prevTrigger are the trigger field's values before and
	// after the change, when the resource has a trigger.
	curTrigger, prevTrigger string
	// recorded is when the cache applied the event, for the history window.
	recordedNanos int64
	// decodedNanos is when the etcd3 store decoded it, 0 if not stamped.
	decodedNanos int64
}

// progress marks that the cache has seen everything up to rv without an
// event: a storage-layer bookmark. It moves the dispatcher's resourceVersion
// and is never forwarded as such.
func progress(rv uint64) *event { return &event{typ: watch.Bookmark, rv: rv} }

func (e *event) isProgress() bool { return e.typ == watch.Bookmark }

// matches reports whether the object (cur, or prev for the side it left)
// passes the predicate: its labels and fields, then its shard.
func matches(pred storage.SelectionPredicate, o *object) bool {
	if !matchesAttrs(pred, o) {
		return false
	}
	if pred.ShardSelector == nil {
		return true
	}
	ok, err := pred.MatchesSharding(o.obj)
	return err == nil && ok
}

// matcherFor is matches for a walk over many objects: the shard selector
// compiled once (shardFilter) rather than formatted and compared as text
// per object. A selector that does not compile is left to upstream's.
func matcherFor(pred storage.SelectionPredicate) func(*object) bool {
	f, err := newShardFilter(pred)
	if err != nil || f == nil {
		return func(o *object) bool { return matches(pred, o) }
	}
	return func(o *object) bool { return matchesAttrs(pred, o) && f.selects(o) }
}

// matchesAttrs is matches without the shard: a watcher checks its own,
// compiled (shardFilter).
func matchesAttrs(pred storage.SelectionPredicate, o *object) bool {
	if o == nil {
		return false
	}
	if pred.Label != nil && !pred.Label.Empty() && !pred.Label.Matches(o.labels) {
		return false
	}
	if pred.Field != nil && !pred.Field.Empty() && !pred.Field.Matches(o.fields) {
		return false
	}
	return true
}
