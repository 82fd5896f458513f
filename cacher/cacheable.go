package cacher

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

// sharedObject is one object as every watcher of one event (or one bookmark
// tick) is sent it. It is never changed, and it is encoded at most once per
// encoder: the apiserver's watch handler hands a runtime.CacheableObject its
// encode function, so a thousand watches of one event cost one encoding, not
// a thousand deep copies and a thousand encodings.
//
// The encodings live as long as the event's dispatch, not the cached object:
// keeping them for the object's lifetime in the cache would double the
// cache's memory for the rare watch that starts from an old RV.
type sharedObject struct {
	obj  runtime.Object
	meta metav1.Object
	// times are the points the live event this object is sent for passed
	// before fan-out; zero for initial events and bookmarks
	// (dispatch_latency.go).
	times eventTimes

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

// share wraps obj, which must not be changed afterwards by anyone.
func share(obj runtime.Object) (*sharedObject, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	return &sharedObject{obj: obj, meta: m}, nil
}

func (s *sharedObject) encoding(id runtime.Identifier) *encoding {
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

// forWatcher is one client's handle on the shared object.
func (s *sharedObject) forWatcher() *cacheableObject { return &cacheableObject{shared: s} }

// cacheableObject is what a client receives: it reads the shared object until
// the client changes something, and from then on its own copy, so no client
// can change what another one is sent. Each client gets its own handle (a
// few words), never the shared one.
//
// Like upstream's caching object, the maps and slices its getters return are
// the shared object's: callers must not modify them in place (the metav1
// accessors of any cached object carry the same rule).
type cacheableObject struct {
	shared *sharedObject
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
	_ runtime.CacheableObject = (*cacheableObject)(nil)
	_ metav1.Object           = (*cacheableObject)(nil)
	_ runtime.Object          = (*cacheableObject)(nil)
)

// current is what the client sees now.
func (o *cacheableObject) current() (runtime.Object, metav1.Object) {
	if o.own != nil {
		return o.own.obj, o.own.md
	}
	return o.shared.obj, o.shared.meta
}

// mutable copies the shared object on the first change.
func (o *cacheableObject) mutable() metav1.Object {
	if o.own == nil {
		obj := o.shared.obj.DeepCopyObject()
		md, _ := meta.Accessor(obj) // the shared object had an accessor
		o.own = &ownedCopy{obj: obj, md: md}
	}
	return o.own.md
}

// CacheEncode implements runtime.CacheableObject. encode takes ownership of
// what it is given (encoders set the kind while encoding), so it gets a copy.
func (o *cacheableObject) CacheEncode(id runtime.Identifier, encode func(runtime.Object, io.Writer) error, w io.Writer) error {
	if o.own != nil {
		return encode(o.own.obj.DeepCopyObject(), w)
	}
	e := o.shared.encoding(id)
	e.once.Do(func() {
		var buf bytes.Buffer
		e.err = encode(o.shared.obj.DeepCopyObject(), &buf)
		e.raw = buf.Bytes()
	})
	if e.err != nil {
		return e.err
	}
	_, err := w.Write(e.raw)
	return err
}

// GetObject implements runtime.CacheableObject: the caller owns the copy.
func (o *cacheableObject) GetObject() runtime.Object {
	obj, _ := o.current()
	return obj.DeepCopyObject()
}

// DeepCopyObject returns a plain copy of the object: whoever copies wants an
// object to change, which a cached encoding would not describe.
func (o *cacheableObject) DeepCopyObject() runtime.Object { return o.GetObject() }

// GetObjectKind returns the handle itself, so that setting the kind copies
// the object first instead of changing it for every client.
func (o *cacheableObject) GetObjectKind() schema.ObjectKind { return o }

func (o *cacheableObject) GroupVersionKind() schema.GroupVersionKind {
	obj, _ := o.current()
	return obj.GetObjectKind().GroupVersionKind()
}

func (o *cacheableObject) SetGroupVersionKind(gvk schema.GroupVersionKind) {
	o.mutable()
	o.own.obj.GetObjectKind().SetGroupVersionKind(gvk)
}

func (o *cacheableObject) md() metav1.Object { _, m := o.current(); return m }

func (o *cacheableObject) GetNamespace() string        { return o.md().GetNamespace() }
func (o *cacheableObject) SetNamespace(v string)       { o.mutable().SetNamespace(v) }
func (o *cacheableObject) GetName() string             { return o.md().GetName() }
func (o *cacheableObject) SetName(v string)            { o.mutable().SetName(v) }
func (o *cacheableObject) GetGenerateName() string     { return o.md().GetGenerateName() }
func (o *cacheableObject) SetGenerateName(v string)    { o.mutable().SetGenerateName(v) }
func (o *cacheableObject) GetUID() types.UID           { return o.md().GetUID() }
func (o *cacheableObject) SetUID(v types.UID)          { o.mutable().SetUID(v) }
func (o *cacheableObject) GetResourceVersion() string  { return o.md().GetResourceVersion() }
func (o *cacheableObject) SetResourceVersion(v string) { o.mutable().SetResourceVersion(v) }
func (o *cacheableObject) GetGeneration() int64        { return o.md().GetGeneration() }
func (o *cacheableObject) SetGeneration(v int64)       { o.mutable().SetGeneration(v) }
func (o *cacheableObject) GetSelfLink() string         { return o.md().GetSelfLink() }
func (o *cacheableObject) SetSelfLink(v string)        { o.mutable().SetSelfLink(v) }
func (o *cacheableObject) GetCreationTimestamp() metav1.Time {
	return o.md().GetCreationTimestamp()
}
func (o *cacheableObject) SetCreationTimestamp(v metav1.Time) {
	o.mutable().SetCreationTimestamp(v)
}
func (o *cacheableObject) GetDeletionTimestamp() *metav1.Time {
	return o.md().GetDeletionTimestamp()
}
func (o *cacheableObject) SetDeletionTimestamp(v *metav1.Time) {
	o.mutable().SetDeletionTimestamp(v)
}
func (o *cacheableObject) GetDeletionGracePeriodSeconds() *int64 {
	return o.md().GetDeletionGracePeriodSeconds()
}
func (o *cacheableObject) SetDeletionGracePeriodSeconds(v *int64) {
	o.mutable().SetDeletionGracePeriodSeconds(v)
}
func (o *cacheableObject) GetLabels() map[string]string       { return o.md().GetLabels() }
func (o *cacheableObject) SetLabels(v map[string]string)      { o.mutable().SetLabels(v) }
func (o *cacheableObject) GetAnnotations() map[string]string  { return o.md().GetAnnotations() }
func (o *cacheableObject) SetAnnotations(v map[string]string) { o.mutable().SetAnnotations(v) }
func (o *cacheableObject) GetFinalizers() []string            { return o.md().GetFinalizers() }
func (o *cacheableObject) SetFinalizers(v []string)           { o.mutable().SetFinalizers(v) }
func (o *cacheableObject) GetOwnerReferences() []metav1.OwnerReference {
	return o.md().GetOwnerReferences()
}
func (o *cacheableObject) SetOwnerReferences(v []metav1.OwnerReference) {
	o.mutable().SetOwnerReferences(v)
}
func (o *cacheableObject) GetManagedFields() []metav1.ManagedFieldsEntry {
	return o.md().GetManagedFields()
}
func (o *cacheableObject) SetManagedFields(v []metav1.ManagedFieldsEntry) {
	o.mutable().SetManagedFields(v)
}
