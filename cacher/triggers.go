package cacher

import (
	"fmt"
	"slices"

	"k8s.io/apiserver/pkg/storage"
)

// watcherSet is every open watcher, filed so an event costs work only for
// the watchers that can match it, not for all of them:
//   - those that pin the trigger field (say spec.nodeName=node-1, as
//     kubelets' pod watches do) by that value;
//   - the others watching one key (kubelets watch each Secret and ConfigMap
//     their pods use by name) by that key;
//   - the others watching a prefix (a namespace, the whole resource) by the
//     prefix, which ends in "/" (storage.PrepareKey): an event looks up
//     each "/"-bounded prefix of its key, a handful of map reads.
//
// It also interns the watchers' match classes (matchClass), by signature.
type watcherSet struct {
	all      map[*watcher]struct{}
	byValue  map[string]map[*watcher]struct{}
	byKey    map[string]map[*watcher]struct{}
	byPrefix map[string]map[*watcher]struct{}
	classes  map[string]*matchClass
}

func newWatcherSet() watcherSet {
	return watcherSet{
		all:      make(map[*watcher]struct{}),
		byValue:  make(map[string]map[*watcher]struct{}),
		byKey:    make(map[string]map[*watcher]struct{}),
		byPrefix: make(map[string]map[*watcher]struct{}),
		classes:  make(map[string]*matchClass),
	}
}

func (s *watcherSet) has(w *watcher) bool {
	_, ok := s.all[w]
	return ok
}

// index is the map and the key w is filed under.
func (s *watcherSet) index(w *watcher) (map[string]map[*watcher]struct{}, string) {
	switch {
	case w.triggered:
		return s.byValue, w.triggerValue
	case !w.recursive:
		return s.byKey, w.key
	default:
		return s.byPrefix, w.key
	}
}

// add files w, with sig its matchSignature (built by the caller, outside
// the cache's lock).
func (s *watcherSet) add(w *watcher, sig string) {
	s.all[w] = struct{}{}
	class := s.classes[sig]
	if class == nil {
		class = &matchClass{sig: sig}
		s.classes[sig] = class
	}
	class.refs++
	w.class = class
	m, k := s.index(w)
	set := m[k]
	if set == nil {
		set = make(map[*watcher]struct{})
		m[k] = set
	}
	set[w] = struct{}{}
}

func (s *watcherSet) remove(w *watcher) {
	if _, ok := s.all[w]; !ok {
		return
	}
	delete(s.all, w)
	if class := w.class; class != nil {
		if class.refs--; class.refs == 0 {
			delete(s.classes, class.sig)
		}
	}
	m, k := s.index(w)
	if set := m[k]; set != nil {
		delete(set, w)
		if len(set) == 0 {
			delete(m, k)
		}
	}
}

// candidates appends the watchers an event may concern: those filed under
// the trigger value of the object before or after the change, under its
// key, or under a prefix of its key. Each watcher is filed once, so none
// comes twice.
func (s *watcherSet) candidates(dst []*watcher, e *event) []*watcher {
	for w := range s.byValue[e.curTrigger] {
		dst = append(dst, w)
	}
	if e.prevTrigger != e.curTrigger {
		for w := range s.byValue[e.prevTrigger] {
			dst = append(dst, w)
		}
	}
	o := e.cur
	if o == nil {
		o = e.prev
	}
	key := o.key
	for w := range s.byKey[key] {
		dst = append(dst, w)
	}
	if len(s.byPrefix) == 0 {
		return dst
	}
	for i := 0; i < len(key); i++ {
		if key[i] != '/' {
			continue
		}
		for w := range s.byPrefix[key[:i+1]] {
			dst = append(dst, w)
		}
	}
	return dst
}

// trigger is the one field whose value files watchers. Like upstream, one
// is supported: it is what kubelets' pod watches need.
type trigger struct {
	field string
	value storage.IndexerFunc
}

func newTrigger(funcs storage.IndexerFuncs) (*trigger, error) {
	switch len(funcs) {
	case 0:
		return nil, nil
	case 1:
		for field, f := range funcs {
			return &trigger{field: field, value: f}, nil
		}
	}
	names := make([]string, 0, len(funcs))
	for field := range funcs {
		names = append(names, field)
	}
	slices.Sort(names)
	return nil, fmt.Errorf("cacher: one trigger function is supported, got %d (%v)", len(funcs), names)
}

// valueFor is the trigger value a watcher pins: its field selector requires
// an exact value of the trigger field, and the predicate says that field is
// indexed.
func (t *trigger) valueFor(pred storage.SelectionPredicate) (string, bool) {
	if t == nil || pred.Field == nil || !slices.Contains(pred.IndexFields, t.field) {
		return "", false
	}
	return pred.Field.RequiresExactMatch(t.field)
}
