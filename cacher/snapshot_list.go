package cacher

import (
	"errors"
	"sort"

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
	if rv > h.c.currentRV() {
		return delegator.Result{ShouldDelegate: !delegator.ConsistentReadSupported()}
	}
	return delegator.Result{ShouldDelegate: !h.c.hasStateAt(rv)}
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

// hasStateAt is whether the snapshots hold the state at rv, which the
// cache has reached and etcd has not compacted (etcd's store answers those
// 410 without a request, as it would for the cache).
func (c *Cacher) hasStateAt(rv uint64) bool {
	if rv == 0 || int64(rv) < c.storage.CompactRevision() {
		return false
	}
	c.state.mu.RLock()
	defer c.state.mu.RUnlock()
	return rv <= c.state.rv && c.state.ready.state == stateReady && c.state.snapshots.covers(rv)
}

// snapshotAt is the state at rv: the checkpoint at or after it, and the
// history's events between them to undo.
func (c *Cacher) snapshotAt(rv uint64) (pastState, bool) {
	if rv == 0 || int64(rv) < c.storage.CompactRevision() {
		return pastState{}, false
	}
	c.state.mu.RLock()
	defer c.state.mu.RUnlock()
	if rv > c.state.rv || c.state.ready.state != stateReady {
		return pastState{}, false
	}
	at, from, ok := c.state.snapshots.checkpointFor(rv)
	if !ok {
		return pastState{}, false
	}
	events, ok := c.eventsBetweenLocked(at, from.rv)
	if !ok {
		return pastState{}, false
	}
	return pastState{tree: from.tree, undo: undoSince(events)}, true
}

// eventsBetweenLocked returns the history's events above after and at or
// below upTo, oldest first; false if the history no longer holds them all.
func (c *Cacher) eventsBetweenLocked(after, upTo uint64) ([]*event, bool) {
	h := c.state.history
	if after < h.startRV {
		return nil, false
	}
	if after >= upTo {
		return nil, true
	}
	first := sort.Search(h.count, func(i int) bool { return h.at(i).rv > after })
	end := first + sort.Search(h.count-first, func(i int) bool { return h.at(first+i).rv > upTo })
	out := make([]*event, end-first)
	for i := range out {
		out[i] = h.at(first + i)
	}
	return out, true
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
	state, ok := c.snapshotAt(rv)
	if !ok {
		return errNoSnapshot
	}
	// A checkpoint is never written: it is read without the lock.
	return c.fillList(listObj, state.ascend(key, fromKey), c.sizeHint(key, state.tree), "", key, rv, listLimit(opts), opts)
}
