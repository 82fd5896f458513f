package objects

import (
	"bytes"
	"fmt"
	"sort"
	"sync"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/client-go/tools/cache"
)

// Compactor holds objects in compact form: serialized with the resource's
// storage codec, beside what the cache reads of them without a decode
// (key, labels, fields, RV, trigger and index values), and decoded on
// every read. A decoded pod is about 5x its bytes (docs/performance.md,
// memory per cached object); a cache that holds bytes pays a decode for
// each object a list returns and each event it fans out instead.
type Compactor struct {
	codec     runtime.Codec
	versioner storage.Versioner
	trigger   *Trigger
	indexers  []namedIndex
}

type namedIndex struct {
	name string
	f    cache.IndexFunc
}

// NewCompactor holds objects with codec, taking their RV with versioner
// and, while they are decoded at entry, their trigger and index values.
func NewCompactor(codec runtime.Codec, versioner storage.Versioner, trigger *Trigger, indexers *cache.Indexers) (*Compactor, error) {
	if codec == nil {
		return nil, fmt.Errorf("compact objects need the resource's storage codec")
	}
	c := &Compactor{codec: codec, versioner: versioner, trigger: trigger}
	if indexers != nil {
		for name, f := range *indexers {
			c.indexers = append(c.indexers, namedIndex{name, f})
		}
		sort.Slice(c.indexers, func(i, j int) bool { return c.indexers[i].name < c.indexers[j].name })
	}
	return c, nil
}

// compactForm is an Object's object in compact form.
type compactForm struct {
	raw     []byte
	rv      uint64
	by      *Compactor
	trigger string
	// index holds the value of each of the Compactor's indexers, in its
	// order: the store indexes an object again when it is replaced or
	// deleted, long after its decoded form is gone.
	index [][]string
}

// Hold is obj in compact form with its key, labels and fields. obj is read
// now and not kept; it must not be shared yet (the codec may set its kind
// while it encodes it).
func (c *Compactor) Hold(key string, obj runtime.Object, lbls labels.Set, flds fields.Set) (*Object, error) {
	rv, err := c.versioner.ObjectResourceVersion(obj)
	if err != nil {
		return nil, fmt.Errorf("reading the resourceVersion of %s: %w", key, err)
	}
	buf := encodeBuffers.Get().(*bytes.Buffer)
	defer encodeBuffers.Put(buf)
	buf.Reset()
	if err := c.codec.Encode(obj, buf); err != nil {
		return nil, fmt.Errorf("encoding %s for the cache: %w", key, err)
	}
	// Held for the object's life: exactly its length, not the buffer's.
	form := &compactForm{raw: bytes.Clone(buf.Bytes()), rv: rv, by: c}
	if c.trigger != nil {
		form.trigger = c.trigger.Value(obj)
	}
	if len(c.indexers) > 0 {
		form.index = make([][]string, len(c.indexers))
		for i, ix := range c.indexers {
			if form.index[i], err = ix.f(obj); err != nil {
				return nil, fmt.Errorf("indexing %s by %s: %w", key, ix.name, err)
			}
		}
	}
	return &Object{Key: key, Labels: lbls, Fields: flds, held: form}, nil
}

// encodeBuffers are Hold's scratch: an encoder grows its buffer as it
// writes, and the object keeps only a copy of the bytes.
var encodeBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// decode is a new decoded copy of the object, owned by the caller.
func (f *compactForm) decode(key string) (runtime.Object, error) {
	obj, err := runtime.Decode(f.by.codec, f.raw)
	if err != nil {
		return nil, fmt.Errorf("decoding the cached %s: %w", key, err)
	}
	return obj, nil
}

// indexValues is the values of the index name, and whether the form holds
// them.
func (f *compactForm) indexValues(name string) ([]string, bool) {
	for i, ix := range f.by.indexers {
		if ix.name == name {
			return f.index[i], true
		}
	}
	return nil, false
}
