package cacher

import (
	"errors"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/cacher/delegator"
)

// errNoSnapshot: the snapshot a list needs is gone (aged out, or a relist)
// since the decision to serve it from the cache; etcd serves it instead.
var errNoSnapshot = errors.New("no snapshot of that state")

var _ delegator.Helper = snapshotHelper{}

// listFromSnapshot serves a page of the state at rv, from fromKey on.
func (c *Cacher) listFromSnapshot(key, fromKey string, rv uint64, opts storage.ListOptions, listObj runtime.Object) error {
	state, ok := c.state.SnapshotAt(rv, c.storage.CompactRevision())
	if !ok {
		return errNoSnapshot
	}
	// A checkpoint is never written: it is read without the lock.
	return c.fillList(listObj, state.Ascend(key, fromKey), c.state.SizeHint(key, state.Tree), "", key, rv, listLimit(opts), opts)
}
