package cacher

import (
	"context"
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
)

// Writes served from the cache (KEP-6404, alpha gate ConsistentGetFromCache):
// a GuaranteedUpdate or a conditional Delete starts from the cached object
// instead of the hint etcd3 may or may not take, and after a conflict reads
// the object again from the cache once it has applied the conflict's
// revision, instead of from etcd. Each attempt is still one conditional
// transaction of the storage (UpdateOnce, DeleteOnce), so etcd decides every
// write; only the reads move. The loop is upstream's (storage.GuaranteedUpdate,
// storage.ConditionalDelete); this file is what it reads through.

// writesFromCache is whether writes start from the cache: the gate on, and a
// codec to encode the starting state with (the no-op check compares bytes).
func (c *Cacher) writesFromCache() bool {
	return c.cfg.Codec != nil && utilfeature.DefaultFeatureGate.Enabled(features.ConsistentGetFromCache)
}

// cacheTxn is one key's storage.TxnDelegator over the cache.
type cacheTxn struct {
	c   *Cacher
	key string
}

var _ storage.TxnDelegator = (*cacheTxn)(nil)

// initialState is the cached object as it is, not waited for (Current is
// false, so a precondition or update error first checks it against a
// consistent read); one the cache does not hold is read consistently.
func (t *cacheTxn) initialState(ctx context.Context, ignoreNotFound bool) (*storage.ObjState, error) {
	if !t.c.Ready() {
		// Not ready is a fallback to the storage's own read, as a cache
		// that cannot catch up is.
		return nil, storage.NewTooLargeResourceVersionError(0, t.c.state.CurrentRV(), 0)
	}
	if o, ok, _ := t.c.state.Get(t.key); ok {
		obj, err := o.Copy()
		if err != nil {
			return nil, err
		}
		return storage.GetStateFromObject(t.c.cfg.Versioner, t.c.cfg.Codec, obj, false)
	}
	return t.GetCurrentState(ctx, ignoreNotFound)
}

// GetCurrentState implements storage.TxnDelegator: the object once the cache
// has applied etcd's current revision.
func (t *cacheTxn) GetCurrentState(ctx context.Context, ignoreNotFound bool) (*storage.ObjState, error) {
	rv, err := t.c.feed.StorageRV(ctx)
	if err != nil {
		return nil, err
	}
	return t.stateAt(ctx, rv, ignoreNotFound)
}

// stateAt is the object once the cache has applied rv.
func (t *cacheTxn) stateAt(ctx context.Context, rv uint64, ignoreNotFound bool) (*storage.ObjState, error) {
	if err := t.c.feed.WaitFresh(ctx, rv); err != nil {
		return nil, err
	}
	o, ok, cacheRV := t.c.state.Get(t.key)
	var obj runtime.Object
	switch {
	case ok:
		var err error
		if obj, err = o.Copy(); err != nil {
			return nil, err
		}
	case !ignoreNotFound:
		return nil, storage.NewKeyNotFoundError(t.key, int64(cacheRV))
	default:
		obj = t.c.cfg.NewFunc()
		if err := runtime.SetZeroValue(obj); err != nil {
			return nil, fmt.Errorf("zeroing a %T: %w", obj, err)
		}
	}
	return storage.GetStateFromObject(t.c.cfg.Versioner, t.c.cfg.Codec, obj, true)
}

// afterConflict is the state to retry from once a transaction lost to
// another write at the conflict's revision (etcd's current, which the
// storage's error carries; 0 when it does not: a consistent read).
func (t *cacheTxn) afterConflict(ctx context.Context, conflict error, orig *storage.ObjState, ignoreNotFound bool) (*storage.ObjState, error) {
	var state *storage.ObjState
	var err error
	if rv, ok := conflictRV(conflict); ok {
		state, err = t.stateAt(ctx, rv, ignoreNotFound)
	} else {
		state, err = t.GetCurrentState(ctx, ignoreNotFound)
	}
	if err != nil {
		return nil, err
	}
	// The cache at the conflict's revision holds the write that won; the
	// same revision again would retry the same conflict forever.
	if orig.Rev != 0 && state.Rev == orig.Rev {
		return nil, storage.NewInternalError(fmt.Errorf("watch cache of %v still at revision %d of %s after a conflict", t.c.cfg.GroupResource, state.Rev, t.key))
	}
	return state, nil
}

// conflictRV is the etcd revision a conflict error carries.
func conflictRV(err error) (uint64, bool) {
	s, ok := storage.ResourceVersion(err)
	if !ok {
		return 0, false
	}
	rv, perr := strconv.ParseUint(s, 10, 64)
	return rv, perr == nil && rv > 0
}

// UpdateOnce implements storage.TxnDelegator.
func (t *cacheTxn) UpdateOnce(ctx context.Context, orig *storage.ObjState, obj runtime.Object, ttl uint64, destination runtime.Object, ignoreNotFound bool) (*storage.ObjState, bool, error) {
	state, err := t.c.storage.UpdateOnce(ctx, t.key, orig, obj, ttl, destination, ignoreNotFound)
	switch {
	case err == nil:
		return state, true, nil
	case !storage.IsConflict(err):
		return state, false, err
	case state != nil:
		// The storage read the current state itself (its no-op check).
		return state, false, nil
	}
	state, err = t.afterConflict(ctx, err, orig, ignoreNotFound)
	return state, false, err
}

// DeleteOnce implements storage.TxnDelegator.
func (t *cacheTxn) DeleteOnce(ctx context.Context, orig *storage.ObjState, out runtime.Object) (*storage.ObjState, bool, error) {
	err := t.c.storage.DeleteOnce(ctx, t.key, orig, out)
	switch {
	case err == nil:
		return orig, true, nil
	case !storage.IsConflict(err):
		return orig, false, err
	}
	state, err := t.afterConflict(ctx, err, orig, false)
	return state, false, err
}

// updateFromCache is GuaranteedUpdate starting from the cache; fellBack is
// true when the cache could not catch up and the caller should write
// through instead (or answer 429, ConsistentListFromCacheSkipTimeoutFallback).
func (c *Cacher) updateFromCache(ctx context.Context, key string, destination runtime.Object, ignoreNotFound bool,
	preconditions *storage.Preconditions, tryUpdate storage.UpdateFunc) (err error, fellBack bool) {
	// A key the storage would refuse gets its error, not the cache's
	// NotFound.
	if key, err = storage.PrepareKey(c.cfg.ResourcePrefix, key, false); err != nil {
		return err, false
	}
	t := &cacheTxn{c: c, key: key}
	orig, err := t.initialState(ctx, ignoreNotFound)
	if err == nil {
		err = storage.GuaranteedUpdate(ctx, t, key, destination, ignoreNotFound, preconditions, tryUpdate, orig)
	}
	return c.cacheWriteOutcome(err)
}

// deleteFromCache is Delete starting from the cache, as updateFromCache.
func (c *Cacher) deleteFromCache(ctx context.Context, key string, out runtime.Object, preconditions *storage.Preconditions,
	validateDeletion storage.ValidateObjectFunc) (err error, fellBack bool) {
	if key, err = storage.PrepareKey(c.cfg.ResourcePrefix, key, false); err != nil {
		return err, false
	}
	t := &cacheTxn{c: c, key: key}
	orig, err := t.initialState(ctx, false)
	if err == nil {
		err = storage.ConditionalDelete(ctx, t, key, out, preconditions, validateDeletion, orig)
	}
	return c.cacheWriteOutcome(err)
}

// cacheWriteOutcome turns a cache that could not catch up into a fallback
// to the storage's own read, or a 429 when the operator asked for no
// fallback, as upstream's delegator does.
func (c *Cacher) cacheWriteOutcome(err error) (error, bool) {
	if !storage.IsTooLargeResourceVersion(err) {
		return err, false
	}
	if skipConsistentFallback() {
		return errors.NewTooManyRequests(err.Error(), tooLargeRVRetrySeconds), false
	}
	return nil, true
}
