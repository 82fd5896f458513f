package cacher

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apiserver/pkg/storage"
)

// A watch of one object (its key, or its collection narrowed by
// metadata.name: a kubelet's watch of its Node, of a Secret its pods
// mount) resuming from before the cache's list needs no backfill when that
// object was, at the list, as it already was at the resume's RV: nothing
// of it lies in the gap. At a restart of 1,000 kubelets the node watches'
// RVs reached back a minute (a node changes, and its watch hears a
// bookmark, about once a minute), and the one backfill that had to reach
// back to the oldest of them read more of etcd's history than it could
// within backfillTimeout, so every one of them waited for it and then
// relisted.

// singleObject is the key of the one object a watch can see, and the name
// that object must have ("" for a watch of the key itself); false when the
// watch can see more than one.
func singleObject(key string, opts storage.ListOptions) (objKey, name string, ok bool) {
	if !opts.Recursive {
		return key, "", true
	}
	name, ok = opts.Predicate.MatchesSingle()
	if !ok {
		return "", "", false
	}
	// A recursive key ends with a slash (storage.PrepareKey); under it
	// the object named name is at key+name, for a cluster-scoped
	// resource and for one namespace alike. Across namespaces no object
	// is at key+name, and the name check below rules out any other
	// layout.
	return key + name, name, true
}

// unchangedSinceLocked reports whether the object at key was, at the
// history's start, the one that was already there at rv: then no event of
// it lies between rv and the start. False when no object was there at the
// start (it may have been deleted in the gap), or it was written after rv.
func (c *Cacher) unchangedSinceLocked(key, name string, rv uint64) bool {
	o := c.state.AtHistoryStartLocked(key)
	if o == nil {
		return false
	}
	if name != "" {
		obj, err := o.Get()
		if err != nil {
			return false
		}
		if m, err := meta.Accessor(obj); err != nil || m.GetName() != name {
			return false
		}
	}
	objRV, err := o.RV(c.cfg.Versioner)
	return err == nil && objRV <= rv
}

// unchangedSince is unchangedSinceLocked for a watch that is about to
// wait for a backfill, taking the read lock.
func (c *Cacher) unchangedSince(key string, opts storage.ListOptions, rv uint64) bool {
	objKey, name, ok := singleObject(key, opts)
	if !ok {
		return false
	}
	var unchanged bool
	c.state.Read(func() { unchanged = c.unchangedSinceLocked(objKey, name, rv) })
	return unchanged
}
