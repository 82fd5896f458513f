package cacher

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage"
)

// Writes go straight through to the wrapped storage: the cache learns of
// them from its own watch, never by a side channel, so what a watcher sees
// is always etcd's order. Under ConsistentGetFromCache a write's reads (its
// starting state, and the state after a conflict) come from the cache
// (write_from_cache.go); the transactions are still etcd's.

// Create implements storage.Interface by writing through.
func (c *Cacher) Create(ctx context.Context, key string, obj, out runtime.Object, ttl uint64) error {
	return c.storage.Create(ctx, key, obj, out, ttl)
}

// Delete implements storage.Interface by writing through, with the cached
// object as the hint the interface allows when it passes the preconditions.
func (c *Cacher) Delete(ctx context.Context, key string, out runtime.Object, preconditions *storage.Preconditions,
	validateDeletion storage.ValidateObjectFunc, _ runtime.Object, opts storage.DeleteOptions) error {
	// A delete of an object that cannot be decoded reads etcd's bytes.
	if c.writesFromCache() && !opts.ExpectTransformOrDecodeError {
		if err, fellBack := c.deleteFromCache(ctx, key, out, preconditions, validateDeletion); !fellBack {
			return err
		}
	}
	return c.storage.Delete(ctx, key, out, preconditions, validateDeletion, c.suggestion(key, preconditions), opts)
}

// DeleteOnce implements storage.Interface: one conditional delete against
// origState.Rev, by the storage, which alone knows etcd's current revision
// on a conflict.
func (c *Cacher) DeleteOnce(ctx context.Context, key string, origState *storage.ObjState, out runtime.Object) error {
	return c.storage.DeleteOnce(ctx, key, origState, out)
}

// GuaranteedUpdate implements storage.Interface by writing through, with the
// cached object as the hint when it passes the preconditions.
func (c *Cacher) GuaranteedUpdate(ctx context.Context, key string, destination runtime.Object, ignoreNotFound bool,
	preconditions *storage.Preconditions, tryUpdate storage.UpdateFunc, _ runtime.Object) error {
	if c.writesFromCache() {
		if err, fellBack := c.updateFromCache(ctx, key, destination, ignoreNotFound, preconditions, tryUpdate); !fellBack {
			return err
		}
	}
	return c.storage.GuaranteedUpdate(ctx, key, destination, ignoreNotFound, preconditions, tryUpdate, c.suggestion(key, preconditions))
}

// UpdateOnce implements storage.Interface: one conditional update against
// origState.Rev, by the storage.
func (c *Cacher) UpdateOnce(ctx context.Context, key string, origState *storage.ObjState, obj runtime.Object, ttl uint64,
	destination runtime.Object, ignoreNotFound bool) (*storage.ObjState, error) {
	return c.storage.UpdateOnce(ctx, key, origState, obj, ttl, destination, ignoreNotFound)
}

// suggestion is the cached object under key as the hint a write may start
// from, copied because the storage layer may set its resourceVersion. It is
// nil when the cache does not hold the object or the object fails the
// preconditions: a hint that fails them would make the storage answer a
// conflict from a possibly stale copy instead of reading etcd's.
func (c *Cacher) suggestion(key string, preconditions *storage.Preconditions) runtime.Object {
	o := c.state.Peek(key)
	if o == nil {
		return nil
	}
	obj, err := o.Copy()
	if err != nil {
		return nil
	}
	if err := preconditions.Check(key, obj); err != nil {
		return nil
	}
	return obj
}
