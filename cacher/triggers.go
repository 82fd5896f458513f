package cacher

import (
	"fmt"
	"slices"

	"k8s.io/apiserver/pkg/storage"
)

// watcherSet is every open watcher, with those that pin the trigger field
// (say spec.nodeName=node-1, as kubelets do) filed by that value, so an
// event wakes only the watchers that can care about it instead of all.
type watcherSet struct {
	all       map[*watcher]struct{}
	untrigged map[*watcher]struct{}
	byValue   map[string]map[*watcher]struct{}
}

func newWatcherSet() watcherSet {
	return watcherSet{
		all:       make(map[*watcher]struct{}),
		untrigged: make(map[*watcher]struct{}),
		byValue:   make(map[string]map[*watcher]struct{}),
	}
}

func (s *watcherSet) has(w *watcher) bool {
	_, ok := s.all[w]
	return ok
}

func (s *watcherSet) add(w *watcher) {
	s.all[w] = struct{}{}
	if !w.triggered {
		s.untrigged[w] = struct{}{}
		return
	}
	set := s.byValue[w.triggerValue]
	if set == nil {
		set = make(map[*watcher]struct{})
		s.byValue[w.triggerValue] = set
	}
	set[w] = struct{}{}
}

func (s *watcherSet) remove(w *watcher) {
	delete(s.all, w)
	if !w.triggered {
		delete(s.untrigged, w)
		return
	}
	if set := s.byValue[w.triggerValue]; set != nil {
		delete(set, w)
		if len(set) == 0 {
			delete(s.byValue, w.triggerValue)
		}
	}
}

// candidates appends the watchers an event may concern: the untriggered
// ones and those filed under the trigger value of the object before or
// after the change.
func (s *watcherSet) candidates(dst []*watcher, e *event) []*watcher {
	for w := range s.untrigged {
		dst = append(dst, w)
	}
	for w := range s.byValue[e.curTrigger] {
		dst = append(dst, w)
	}
	if e.prevTrigger != e.curTrigger {
		for w := range s.byValue[e.prevTrigger] {
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
