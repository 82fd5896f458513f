package objects

import (
	"maps"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/watchkeeper/watchkeeper/cacher/internal/versions"
)

// Object is a cached object with the attributes selectors look at, computed
// once when it enters the cache instead of once per watcher. Its object is
// read through Get or Copy, so that how it is held stays the Object's
// business.
type Object struct {
	Key    string
	Labels labels.Set
	Fields fields.Set
	obj    runtime.Object
}

// NewDecoded is the cached object obj, held as it is.
func NewDecoded(key string, obj runtime.Object, lbls labels.Set, flds fields.Set) *Object {
	return &Object{Key: key, obj: obj, Labels: lbls, Fields: flds}
}

// Get is the object, for reading only: its memory may be shared with
// other cached objects and with every reader.
func (o *Object) Get() (runtime.Object, error) { return o.obj, nil }

// Copy is the object as a copy the caller may write.
func (o *Object) Copy() (runtime.Object, error) { return o.obj.DeepCopyObject(), nil }

// Decoded is the object when it is held decoded, for the cache's own
// sharing of memory between objects.
func (o *Object) Decoded() runtime.Object { return o.obj }

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
