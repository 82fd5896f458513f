package objects

import (
	"fmt"
	"slices"

	"k8s.io/apiserver/pkg/storage"
)

// Trigger is the one field whose value files watchers. Like upstream, one
// is supported: it is what kubelets' pod watches need.
type Trigger struct {
	field string
	Value storage.IndexerFunc
}

// NewTrigger is the trigger of funcs: nil for none, an error for more than
// one (the cache files watchers by one trigger field).
func NewTrigger(funcs storage.IndexerFuncs) (*Trigger, error) {
	switch len(funcs) {
	case 0:
		return nil, nil
	case 1:
		for field, f := range funcs {
			return &Trigger{field: field, Value: f}, nil
		}
	}
	names := make([]string, 0, len(funcs))
	for field := range funcs {
		names = append(names, field)
	}
	slices.Sort(names)
	return nil, fmt.Errorf("cacher: one trigger function is supported, got %d (%v)", len(funcs), names)
}

// Of is o's trigger value; an object that cannot be read has none, as an
// object without the field.
func (t *Trigger) Of(o *Object) string {
	if f, ok := o.held.(*compactForm); ok && f.by.trigger == t {
		return f.trigger
	}
	obj, err := o.Get()
	if err != nil {
		return ""
	}
	return t.Value(obj)
}

// ValueFor is the trigger value a watcher pins: its field selector requires
// an exact value of the trigger field, and the predicate says that field is
// indexed.
func (t *Trigger) ValueFor(pred storage.SelectionPredicate) (string, bool) {
	if t == nil || pred.Field == nil || !slices.Contains(pred.IndexFields, t.field) {
		return "", false
	}
	return pred.Field.RequiresExactMatch(t.field)
}
