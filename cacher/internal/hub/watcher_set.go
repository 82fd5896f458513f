package hub

import (
	"slices"

	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
)

// watcherSet is every open watcher, filed so an event costs work only for
// the watchers that can match it, not for all of them:
//   - those that pin the trigger field (say spec.nodeName=node-1, as
//     kubelets' pod watches do) by that value;
//   - the others watching one key (kubelets watch each Secret and ConfigMap
//     their pods use by name) by that key;
//   - the others watching a prefix (a namespace, the whole resource) by the
//     prefix, which ends in "/" (storage.PrepareKey): an event looks up
//     each "/"-bounded prefix of its key, a handful of map reads;
//   - of those, the ones with a shard selector by prefix, shard field and
//     the buckets of the hash ranges they select (shardBuckets): an event
//     hashes its shard key once per field in use and meets only the
//     watchers of its bucket.
//
// Each index holds, per value, key or prefix, a list of its watchers in no
// order: every event walks the lists it looks up, and a slice walks faster
// than a map (BenchmarkDispatch measures it). A
// watcher is on one list and all keeps its place there, so it leaves in
// O(1).
//
// It also interns the watchers' match classes (matchClass), by signature.
type watcherSet struct {
	// all is every watcher filed, and its place in the list it is filed
	// on (unused for one filed by shard).
	all      map[*Watcher]int
	byValue  watcherIndex
	byKey    watcherIndex
	byPrefix watcherIndex
	byShard  map[shardKey]*shardBuckets
	// shardFields counts the byShard entries per shard field.
	shardFields map[string]int
	classes     map[string]*matchClass
}

// watcherIndex files watchers by one string: a trigger value, a key or a
// prefix.
type watcherIndex map[string][]*Watcher

func newWatcherSet() watcherSet {
	return watcherSet{
		all:         make(map[*Watcher]int),
		byValue:     make(watcherIndex),
		byKey:       make(watcherIndex),
		byPrefix:    make(watcherIndex),
		byShard:     make(map[shardKey]*shardBuckets),
		shardFields: make(map[string]int),
		classes:     make(map[string]*matchClass),
	}
}

func (s *watcherSet) has(w *Watcher) bool {
	_, ok := s.all[w]
	return ok
}

// index is the index and the string w is filed under.
func (s *watcherSet) index(w *Watcher) (watcherIndex, string) {
	switch {
	case w.Triggered:
		return s.byValue, w.TriggerValue
	case !w.Recursive:
		return s.byKey, w.Key
	default:
		return s.byPrefix, w.Key
	}
}

// add files w, with sig its matchSignature (built by the caller, outside
// the hub's lock). The hub's lock guards the set (hub.go).
func (s *watcherSet) add(w *Watcher, sig string) {
	class := s.classes[sig]
	if class == nil {
		class = &matchClass{sig: sig}
		s.classes[sig] = class
	}
	class.refs++
	w.class = class
	if w.byShard() {
		k := shardKey{w.Key, w.Shard.Field}
		b := s.byShard[k]
		if b == nil {
			b = &shardBuckets{}
			s.byShard[k] = b
			s.shardFields[k.field]++
		}
		b.add(w)
		s.all[w] = 0
		return
	}
	m, k := s.index(w)
	s.all[w] = len(m[k])
	m[k] = append(m[k], w)
}

func (s *watcherSet) remove(w *Watcher) {
	slot, ok := s.all[w]
	if !ok {
		return
	}
	delete(s.all, w)
	if class := w.class; class != nil {
		if class.refs--; class.refs == 0 {
			delete(s.classes, class.sig)
		}
	}
	if w.byShard() {
		k := shardKey{w.Key, w.Shard.Field}
		b := s.byShard[k]
		b.remove(w)
		if b.watchers == 0 {
			delete(s.byShard, k)
			if s.shardFields[k.field]--; s.shardFields[k.field] == 0 {
				delete(s.shardFields, k.field)
			}
		}
		return
	}
	m, k := s.index(w)
	list := m[k]
	// The last watcher takes w's place.
	last := len(list) - 1
	moved := list[last]
	list[slot] = moved
	if moved != w {
		s.all[moved] = slot
	}
	list[last] = nil
	list = list[:last]
	switch {
	case len(list) == 0:
		delete(m, k)
	case cap(list) > 64 && len(list) < cap(list)/4:
		// A list that held a crowd (a fan-out's watchers) gives the
		// array back once they have mostly gone.
		m[k] = slices.Clone(list)
	default:
		m[k] = list
	}
}

// candidates appends the watchers an event may concern: those filed under
// the trigger value of the object before or after the change, under its
// key, under a prefix of its key, or, sharded, under a prefix with a range
// holding its shard key's hash. Each watcher is filed once, so none comes
// twice.
func (s *watcherSet) candidates(dst []*Watcher, e *objects.Event) []*Watcher {
	dst, _ = s.candidatesAndShardFiltered(dst, e)
	return dst
}

// candidatesAndShardFiltered is candidates, and how many sharded watchers
// of the event's prefixes its shard key left out (upstream's
// apiserver_watch_filtered_events_total counts those, after label and
// field selection, which the index does not look at).
func (s *watcherSet) candidatesAndShardFiltered(dst []*Watcher, e *objects.Event) ([]*Watcher, int) {
	dst = append(dst, s.byValue[e.CurTrigger]...)
	if e.PrevTrigger != e.CurTrigger {
		dst = append(dst, s.byValue[e.PrevTrigger]...)
	}
	o := e.Cur
	if o == nil {
		o = e.Prev
	}
	key := o.Key
	dst = append(dst, s.byKey[key]...)
	if len(s.byPrefix) > 0 {
		for i := 0; i < len(key); i++ {
			if key[i] != '/' {
				continue
			}
			dst = append(dst, s.byPrefix[key[:i+1]]...)
		}
	}
	if len(s.byShard) == 0 {
		return dst, 0
	}
	return s.shardCandidates(dst, o)
}

// shardCandidates appends the sharded watchers of o's prefixes whose
// ranges hold o's shard key hash, and counts those whose do not. cur and
// prev hash alike: the shard key is immutable.
func (s *watcherSet) shardCandidates(dst []*Watcher, o *objects.Object) ([]*Watcher, int) {
	key := o.Key
	filtered := 0
	for field := range s.shardFields {
		h, ok := objects.ShardHashOf(o, field)
		for i := 0; i < len(key); i++ {
			if key[i] != '/' {
				continue
			}
			sb := s.byShard[shardKey{key[:i+1], field}]
			if sb == nil {
				continue
			}
			in := 0
			if ok {
				for _, w := range sb.buckets[objects.BucketOf(h)] {
					if w.Shard.Contains(h) {
						dst = append(dst, w)
						in++
					}
				}
			}
			filtered += sb.watchers - in
		}
	}
	return dst, filtered
}
