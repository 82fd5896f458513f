package state

import (
	"iter"
	"sort"
	"strings"

	"k8s.io/utils/third_party/forked/golang/btree"

	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
)

// orderedObjects keeps the cached objects sorted by key beside the indexer,
// so a list walks only the keys under its prefix, already in order, instead
// of copying and sorting every object of the resource (upstream's cache keeps
// a B-tree for the same reason). State.mu guards it: writers hold the
// lock, lists the read lock.
type orderedObjects struct{ tree *btree.BTree[*objects.Object] }

const orderedDegree = 32

func newOrderedObjects() orderedObjects {
	return orderedObjects{tree: btree.New[*objects.Object](orderedDegree, func(a, b *objects.Object) bool { return a.Key < b.Key })}
}

func (o orderedObjects) set(obj *objects.Object)    { o.tree.ReplaceOrInsert(obj) }
func (o orderedObjects) delete(obj *objects.Object) { o.tree.Delete(obj) }

// clone is a copy-on-write copy, O(1): it may be read without the cache's
// lock while the original takes writes. Taking it writes the original's
// copy-on-write context, so the caller holds the lock exclusively.
func (o orderedObjects) clone() orderedObjects { return orderedObjects{tree: o.tree.Clone()} }

// reset replaces every object, after a (re)list.
func (o *orderedObjects) reset(objs []any) {
	*o = newOrderedObjects()
	for _, obj := range objs {
		o.set(obj.(*objects.Object))
	}
}

func (o orderedObjects) len() int { return o.tree.Len() }

// ascend yields the objects whose key starts with prefix, from the key
// start on, in key order, without collecting them.
func (o orderedObjects) ascend(prefix, start string) iter.Seq[*objects.Object] {
	return func(yield func(*objects.Object) bool) {
		o.tree.AscendGreaterOrEqual(&objects.Object{Key: start}, func(obj *objects.Object) bool {
			return strings.HasPrefix(obj.Key, prefix) && yield(obj)
		})
	}
}

// under returns the objects whose key starts with prefix, in key order.
func (o orderedObjects) under(prefix string) []*objects.Object { return o.from(prefix, prefix) }

// from returns the objects whose key starts with prefix, from the key start
// on (a continue token's), in key order.
func (o orderedObjects) from(prefix, start string) []*objects.Object {
	var out []*objects.Object
	o.tree.AscendGreaterOrEqual(&objects.Object{Key: start}, func(obj *objects.Object) bool {
		if !strings.HasPrefix(obj.Key, prefix) {
			return false
		}
		out = append(out, obj)
		return true
	})
	return out
}

// SortObjects sorts objs by key, the order lists are served in.
func SortObjects(objs []*objects.Object) {
	sort.Slice(objs, func(i, j int) bool { return objs[i].Key < objs[j].Key })
}
