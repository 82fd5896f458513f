package objects

import (
	"maps"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/client-go/tools/cache"

	"github.com/watchkeeper/watchkeeper/cacher/internal/versions"
)

// Object is a cached object with the attributes selectors look at, computed
// once when it enters the cache instead of once per watcher. Its object is
// read through Get or Copy: it is held decoded (NewDecoded) or in compact
// form (Compactor.Hold).
type Object struct {
	Key    string
	Labels labels.Set
	Fields fields.Set
	// held is the runtime.Object, or its *compactForm.
	held any
}

// NewDecoded is the cached object obj, held as it is.
func NewDecoded(key string, obj runtime.Object, lbls labels.Set, flds fields.Set) *Object {
	return &Object{Key: key, held: obj, Labels: lbls, Fields: flds}
}

// Get is the object, for reading only: its memory may be shared with
// other cached objects and with every reader. In compact form it is a
// new decode each time.
func (o *Object) Get() (runtime.Object, error) {
	if f, ok := o.held.(*compactForm); ok {
		return f.decode(o.Key)
	}
	return o.Decoded(), nil
}

// Copy is the object as a copy the caller may write.
func (o *Object) Copy() (runtime.Object, error) {
	if f, ok := o.held.(*compactForm); ok {
		return f.decode(o.Key)
	}
	return o.Decoded().DeepCopyObject(), nil
}

// Decoded is the object when it is held decoded, for the cache's own
// sharing of memory between objects; nil in compact form.
func (o *Object) Decoded() runtime.Object {
	obj, _ := o.held.(runtime.Object)
	return obj
}

// IsCompact is whether the object is held in compact form.
func (o *Object) IsCompact() bool {
	_, ok := o.held.(*compactForm)
	return ok
}

// RV is the object's resourceVersion, read with v when held decoded.
func (o *Object) RV(v storage.Versioner) (uint64, error) {
	if f, ok := o.held.(*compactForm); ok {
		return f.rv, nil
	}
	return v.ObjectResourceVersion(o.Decoded())
}

// IndexValues is the object's values for the store's index name, whose
// function is f: in compact form the values taken as it entered.
func (o *Object) IndexValues(name string, f cache.IndexFunc) ([]string, error) {
	if form, ok := o.held.(*compactForm); ok {
		if values, ok := form.indexValues(name); ok {
			return values, nil
		}
	}
	obj, err := o.Get()
	if err != nil {
		return nil, err
	}
	return f(obj)
}

// ShareUnchanged makes o, a new version of prev, hold prev's key and, where
// they did not change, its labels and fields, and the parts of its object
// (versions.Share): the history keeps both versions, and most updates (a
// status, a spec field) leave the rest as it was. None is written once
// made.
func (o *Object) ShareUnchanged(prev *Object) {
	o.Key = prev.Key
	if cur, old := o.Decoded(), prev.Decoded(); cur != nil && old != nil {
		versions.Share(cur, old)
	}
	if maps.Equal(o.Labels, prev.Labels) {
		o.Labels = prev.Labels
	}
	if maps.Equal(o.Fields, prev.Fields) {
		o.Fields = prev.Fields
	}
}
