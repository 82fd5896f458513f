package cacher

import (
	"errors"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/cacher/delegator"
)

// errNoSnapshot: the snapshot a list needs is gone (aged out, or a relist)
// since the decision to serve it from the cache; etcd serves it instead.
var errNoSnapshot = errors.New("no snapshot of that state")

// snapshotHelper tells upstream's delegator which lists the cache's
// snapshots can serve: an exact RV, or a continue token's RV, that a
// snapshot still covers and the cache has reached.
type snapshotHelper struct{ c *Cacher }

var _ delegator.Helper = snapshotHelper{}

func (h snapshotHelper) ShouldDelegateExactRV(rv string, recursive bool) (delegator.Result, error) {
	if !recursive {
		return delegator.Result{ShouldDelegate: true}, nil
	}
	parsed, err := h.c.versioner.ParseResourceVersion(rv)
	if err != nil {
		return delegator.Result{}, err
	}
	return h.exactRV(parsed), nil
}

// exactRV: an RV the cache has not reached yet is waited for and then
// served from its snapshot where etcd's consistent reads let the cache
// catch up (upstream's rule); one it has reached, from a snapshot that
// still holds it.
func (h snapshotHelper) exactRV(rv uint64) delegator.Result {
	if rv > h.c.state.currentRV() {
		return delegator.Result{ShouldDelegate: !delegator.ConsistentReadSupported()}
	}
	return delegator.Result{ShouldDelegate: !h.c.state.hasStateAt(rv, h.c.storage.CompactRevision())}
}

func (h snapshotHelper) ShouldDelegateContinue(token string, recursive bool) (delegator.Result, error) {
	if !recursive {
		return delegator.Result{ShouldDelegate: true}, nil
	}
	_, rv, err := storage.DecodeContinue(token, h.c.resourcePrefix)
	if err != nil {
		return delegator.Result{}, err
	}
	if rv <= 0 {
		// A negative RV continues at the current state: a consistent read.
		return h.ShouldDelegateConsistentRead()
	}
	return h.exactRV(uint64(rv)), nil
}

func (h snapshotHelper) ShouldDelegateConsistentRead() (delegator.Result, error) {
	return delegator.CacheWithoutSnapshots{}.ShouldDelegateConsistentRead()
}

// pastListPoint is the RV and start key of a list the snapshots serve: an
// exact RV (resourceVersionMatch=Exact, or a limit with an RV, the legacy
// form), or a continue token with its first page's RV. ok is false for a
// list of the current state.
func (c *Cacher) pastListPoint(opts storage.ListOptions, key string) (rv uint64, fromKey string, ok bool) {
	if !c.state.snapshotting || !opts.Recursive {
		return 0, "", false
	}
	if token := opts.Predicate.Continue; token != "" {
		from, crv, err := storage.DecodeContinue(token, key)
		if err != nil || crv <= 0 {
			return 0, "", false
		}
		return uint64(crv), from, true
	}
	exact := opts.ResourceVersionMatch == metav1.ResourceVersionMatchExact ||
		(opts.ResourceVersionMatch == "" && opts.Predicate.Limit > 0 && opts.ResourceVersion != "" && opts.ResourceVersion != "0")
	if !exact {
		return 0, "", false
	}
	parsed, err := c.versioner.ParseResourceVersion(opts.ResourceVersion)
	if err != nil || parsed == 0 {
		return 0, "", false
	}
	return parsed, key, true
}

// listFromSnapshot serves a page of the state at rv, from fromKey on.
func (c *Cacher) listFromSnapshot(key, fromKey string, rv uint64, opts storage.ListOptions, listObj runtime.Object) error {
	state, ok := c.state.snapshotAt(rv, c.storage.CompactRevision())
	if !ok {
		return errNoSnapshot
	}
	// A checkpoint is never written: it is read without the lock.
	return c.fillList(listObj, state.ascend(key, fromKey), c.state.sizeHint(key, state.tree), "", key, rv, listLimit(opts), opts)
}
