package cacher

import (
	"fmt"
	"slices"

	"k8s.io/apiserver/pkg/storage"
)

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
