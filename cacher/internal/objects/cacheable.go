package objects

import (
	"bytes"
	"io"
	"maps"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// SharedObject is one object as every watcher of one event (or one bookmark
// tick) is sent it. It is never changed, and it is encoded at most once per
// encoder: the apiserver's watch handler hands a runtime.CacheableObject its
// encode function, so a thousand watches of one event cost one encoding, not
// a thousand deep copies and a thousand encodings.
//
// The encodings live as long as the event's dispatch, not the cached object:
// keeping them for the object's lifetime in the cache would double the
// cache's memory for the rare watch that starts from an old RV.
type SharedObject struct {
	obj  runtime.Object
	meta metav1.Object
	// Times are the points the live event this object is sent for passed
	// before fan-out; zero for initial events and bookmarks
	// (dispatch_latency.go).
	Times EventTimes

	// encodings is copied on write: a thousand watches encoding one event
	// read it at once, and only the first for each encoder writes.
	encodings atomic.Pointer[map[runtime.Identifier]*encoding]
	mu        sync.Mutex // serialises writers of encodings
}

type encoding struct {
	once sync.Once
	raw  []byte
	err  error
}

// Share wraps obj, which must not be changed afterwards by anyone.
func Share(obj runtime.Object) (*SharedObject, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	return &SharedObject{obj: obj, meta: m}, nil
}

func (s *SharedObject) encoding(id runtime.Identifier) *encoding {
	if m := s.encodings.Load(); m != nil {
		if e, ok := (*m)[id]; ok {
			return e
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.encodings.Load()
	if old != nil {
		if e, ok := (*old)[id]; ok {
			return e
		}
	}
	m := make(map[runtime.Identifier]*encoding, 1)
	if old != nil {
		maps.Copy(m, *old)
	}
	e := &encoding{}
	m[id] = e
	s.encodings.Store(&m)
	return e
}

// ForWatcher is one client's handle on the shared object.
func (s *SharedObject) ForWatcher() *CacheableObject { return &CacheableObject{Shared: s} }

// CacheableObject is what a client receives: it reads the shared object until
// the client changes something, and from then on its own copy, so no client
// can change what another one is sent. Each client gets its own handle (a
// few words), never the shared one.
//
// Like upstream's caching object, the maps and slices its getters return are
// the shared object's: callers must not modify them in place (the metav1
// accessors of any cached object carry the same rule).
type CacheableObject struct {
	Shared *SharedObject
	own    *ownedCopy
}

// ownedCopy is a client's own copy of the object, made on its first change.
// It hangs off the handle, not in it: the dispatcher allocates a handle per
// delivery, and two words make that 16 bytes instead of 48: in a fan-out
// the handles are a large part of all the server allocates, so of its
// garbage collections too.
type ownedCopy struct {
	obj runtime.Object
	md  metav1.Object
}

var (
	_ runtime.CacheableObject = (*CacheableObject)(nil)
	_ metav1.Object           = (*CacheableObject)(nil)
	_ runtime.Object          = (*CacheableObject)(nil)
)

// current is what the client sees now.
func (o *CacheableObject) current() (runtime.Object, metav1.Object) {
	if o.own != nil {
		return o.own.obj, o.own.md
	}
	return o.Shared.obj, o.Shared.meta
}

// mutable copies the shared object on the first change.
func (o *CacheableObject) mutable() metav1.Object {
	if o.own == nil {
		obj := o.Shared.obj.DeepCopyObject()
		md, _ := meta.Accessor(obj) // the shared object had an accessor
		o.own = &ownedCopy{obj: obj, md: md}
	}
	return o.own.md
}

// CacheEncode implements runtime.CacheableObject. encode takes ownership of
// what it is given (encoders set the kind while encoding), so it gets a copy.
func (o *CacheableObject) CacheEncode(id runtime.Identifier, encode func(runtime.Object, io.Writer) error, w io.Writer) error {
	if o.own != nil {
		return encode(o.own.obj.DeepCopyObject(), w)
	}
	e := o.Shared.encoding(id)
	e.once.Do(func() {
		var buf bytes.Buffer
		e.err = encode(o.Shared.obj.DeepCopyObject(), &buf)
		e.raw = buf.Bytes()
	})
	if e.err != nil {
		return e.err
	}
	_, err := w.Write(e.raw)
	return err
}

// GetObject implements runtime.CacheableObject: the caller owns the copy.
func (o *CacheableObject) GetObject() runtime.Object {
	obj, _ := o.current()
	return obj.DeepCopyObject()
}

// DeepCopyObject returns a plain copy of the object: whoever copies wants an
// object to change, which a cached encoding would not describe.
func (o *CacheableObject) DeepCopyObject() runtime.Object { return o.GetObject() }

// GetObjectKind returns the handle itself, so that setting the kind copies
// the object first instead of changing it for every client.
func (o *CacheableObject) GetObjectKind() schema.ObjectKind { return o }

func (o *CacheableObject) GroupVersionKind() schema.GroupVersionKind {
	obj, _ := o.current()
	return obj.GetObjectKind().GroupVersionKind()
}

func (o *CacheableObject) SetGroupVersionKind(gvk schema.GroupVersionKind) {
	o.mutable()
	o.own.obj.GetObjectKind().SetGroupVersionKind(gvk)
}

func (o *CacheableObject) md() metav1.Object { _, m := o.current(); return m }

func (o *CacheableObject) GetNamespace() string        { return o.md().GetNamespace() }
func (o *CacheableObject) SetNamespace(v string)       { o.mutable().SetNamespace(v) }
func (o *CacheableObject) GetName() string             { return o.md().GetName() }
func (o *CacheableObject) SetName(v string)            { o.mutable().SetName(v) }
func (o *CacheableObject) GetGenerateName() string     { return o.md().GetGenerateName() }
func (o *CacheableObject) SetGenerateName(v string)    { o.mutable().SetGenerateName(v) }
func (o *CacheableObject) GetUID() types.UID           { return o.md().GetUID() }
func (o *CacheableObject) SetUID(v types.UID)          { o.mutable().SetUID(v) }
func (o *CacheableObject) GetResourceVersion() string  { return o.md().GetResourceVersion() }
func (o *CacheableObject) SetResourceVersion(v string) { o.mutable().SetResourceVersion(v) }
func (o *CacheableObject) GetGeneration() int64        { return o.md().GetGeneration() }
func (o *CacheableObject) SetGeneration(v int64)       { o.mutable().SetGeneration(v) }
func (o *CacheableObject) GetSelfLink() string         { return o.md().GetSelfLink() }
func (o *CacheableObject) SetSelfLink(v string)        { o.mutable().SetSelfLink(v) }
func (o *CacheableObject) GetCreationTimestamp() metav1.Time {
	return o.md().GetCreationTimestamp()
}
func (o *CacheableObject) SetCreationTimestamp(v metav1.Time) {
	o.mutable().SetCreationTimestamp(v)
}
func (o *CacheableObject) GetDeletionTimestamp() *metav1.Time {
	return o.md().GetDeletionTimestamp()
}
func (o *CacheableObject) SetDeletionTimestamp(v *metav1.Time) {
	o.mutable().SetDeletionTimestamp(v)
}
func (o *CacheableObject) GetDeletionGracePeriodSeconds() *int64 {
	return o.md().GetDeletionGracePeriodSeconds()
}
func (o *CacheableObject) SetDeletionGracePeriodSeconds(v *int64) {
	o.mutable().SetDeletionGracePeriodSeconds(v)
}
func (o *CacheableObject) GetLabels() map[string]string       { return o.md().GetLabels() }
func (o *CacheableObject) SetLabels(v map[string]string)      { o.mutable().SetLabels(v) }
func (o *CacheableObject) GetAnnotations() map[string]string  { return o.md().GetAnnotations() }
func (o *CacheableObject) SetAnnotations(v map[string]string) { o.mutable().SetAnnotations(v) }
func (o *CacheableObject) GetFinalizers() []string            { return o.md().GetFinalizers() }
func (o *CacheableObject) SetFinalizers(v []string)           { o.mutable().SetFinalizers(v) }
func (o *CacheableObject) GetOwnerReferences() []metav1.OwnerReference {
	return o.md().GetOwnerReferences()
}
func (o *CacheableObject) SetOwnerReferences(v []metav1.OwnerReference) {
	o.mutable().SetOwnerReferences(v)
}
func (o *CacheableObject) GetManagedFields() []metav1.ManagedFieldsEntry {
	return o.md().GetManagedFields()
}
func (o *CacheableObject) SetManagedFields(v []metav1.ManagedFieldsEntry) {
	o.mutable().SetManagedFields(v)
}

// EventTimes are the points one event passed before fan-out; dispatched
// is 0 for an event sent from the history as an initial event.
type EventTimes struct {
	Decoded, Received, Dispatched int64
}

// Live is whether the event was dispatched (an initial or catch-up event
// is not, and is not timed).
func (t EventTimes) Live() bool { return t.Dispatched != 0 }
