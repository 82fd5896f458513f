package cacher

import (
	"iter"
	"strings"

	"k8s.io/utils/third_party/forked/golang/btree"
)

// orderedObjects keeps the cached objects sorted by key beside the indexer,
// so a list walks only the keys under its prefix, already in order, instead
// of copying and sorting every object of the resource (upstream's cache keeps
// a B-tree for the same reason). cacheState.mu guards it: writers hold the
// lock, lists the read lock.
type orderedObjects struct{ tree *btree.BTree[*object] }

const orderedDegree = 32

func newOrderedObjects() orderedObjects {
	return orderedObjects{tree: btree.New[*object](orderedDegree, func(a, b *object) bool { return a.key < b.key })}
}

func (o orderedObjects) set(obj *object)    { o.tree.ReplaceOrInsert(obj) }
func (o orderedObjects) delete(obj *object) { o.tree.Delete(obj) }

// clone is a copy-on-write copy, O(1): it may be read without the cache's
// lock while the original takes writes. Taking it writes the original's
// copy-on-write context, so the caller holds the lock exclusively.
func (o orderedObjects) clone() orderedObjects { return orderedObjects{tree: o.tree.Clone()} }

// reset replaces every object, after a (re)list.
func (o *orderedObjects) reset(objs []any) {
	*o = newOrderedObjects()
	for _, obj := range objs {
		o.set(obj.(*object))
	}
}

func (o orderedObjects) len() int { return o.tree.Len() }

// ascend yields the objects whose key starts with prefix, from the key
// start on, in key order, without collecting them.
func (o orderedObjects) ascend(prefix, start string) iter.Seq[*object] {
	return func(yield func(*object) bool) {
		o.tree.AscendGreaterOrEqual(&object{key: start}, func(obj *object) bool {
			return strings.HasPrefix(obj.key, prefix) && yield(obj)
		})
	}
}

// under returns the objects whose key starts with prefix, in key order.
func (o orderedObjects) under(prefix string) []*object { return o.from(prefix, prefix) }

// from returns the objects whose key starts with prefix, from the key start
// on (a continue token's), in key order.
func (o orderedObjects) from(prefix, start string) []*object {
	var out []*object
	o.tree.AscendGreaterOrEqual(&object{key: start}, func(obj *object) bool {
		if !strings.HasPrefix(obj.key, prefix) {
			return false
		}
		out = append(out, obj)
		return true
	})
	return out
}
