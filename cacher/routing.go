package cacher

import (
	"context"
	goerrors "errors"

	"k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/cacher/delegator"
	utilfeature "k8s.io/apiserver/pkg/util/feature"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachemetrics"
)

// Routing: which reads the cache serves and which go to etcd, in one place,
// as upstream's CacheDelegator keeps them. A Get or a list comes here; what
// the cache serves is read.go (the current state) and snapshot_list.go
// (a past state).

// Get implements storage.Interface. Any RV but "" is served from the cache
// at or above it. RV "" goes to etcd, as upstream does: a consistent read of
// one key costs etcd about what the progress request to catch the cache up
// would, and etcd also knows objects stored under a key other than the one
// KeyFunc gives them, which the conformance suite relies on.
func (c *Cacher) Get(ctx context.Context, key string, opts storage.GetOptions, objPtr runtime.Object) error {
	key, err := storage.PrepareKey(c.cfg.ResourcePrefix, key, false)
	if err != nil {
		return err
	}
	rv, err := parseRequestRV(c.cfg.Versioner, opts.ResourceVersion)
	if err != nil {
		return err
	}
	if opts.ResourceVersion == "" {
		c.metrics.ReadToStorage(cachemetrics.GetConsistent)
		return c.storage.Get(ctx, key, opts, objPtr)
	}
	if c.feed.OverBudget() {
		c.metrics.ReadToStorage(cachemetrics.GetOverBudget)
		return c.storage.Get(ctx, key, opts, objPtr)
	}
	if !c.Ready() {
		// Etcd can answer any Get; the cache is only faster.
		c.metrics.ReadToStorage(cachemetrics.GetNotReady)
		return c.storage.Get(ctx, key, opts, objPtr)
	}
	if err := c.feed.WaitFresh(ctx, rv); err != nil {
		return err
	}
	o, ok, cacheRV := c.state.Get(key)
	if !ok {
		if opts.IgnoreNotFound {
			return runtime.SetZeroValue(objPtr)
		}
		return storage.NewKeyNotFoundError(key, int64(cacheRV))
	}
	obj, err := o.Get()
	if err != nil {
		return err
	}
	return setObject(objPtr, obj)
}

// GetList implements storage.Interface. Lists the cache can serve exactly
// (RV "0", not-older-than, consistent once the cache caught up) come from
// memory; exact-RV lists and later pages from its snapshots
// (snapshot_list.go) while they hold that RV, else from etcd.
func (c *Cacher) GetList(ctx context.Context, key string, opts storage.ListOptions, listObj runtime.Object) error {
	if _, _, err := storage.ValidateListOptions(c.cfg.ResourcePrefix, c.cfg.Versioner, opts); err != nil {
		return err
	}
	if c.feed.OverBudget() {
		c.metrics.ReadToStorage(cachemetrics.ListOverBudget)
		return c.storage.GetList(ctx, key, opts, listObj)
	}
	var helper delegator.Helper = delegator.CacheWithoutSnapshots{}
	if c.state.SnapshotsOn() {
		helper = snapshotHelper{c}
	}
	decision, err := delegator.ShouldDelegateList(opts, helper)
	if err != nil {
		return err
	}
	if decision.ShouldDelegate {
		// A list at an RV ahead of the cache waits for the cache to reach
		// it, as upstream does, and is a 504 if it does not: etcd would read
		// an RV beyond int64 as a negative revision and answer 500.
		if rv, err := c.cfg.Versioner.ParseResourceVersion(opts.ResourceVersion); err == nil && rv > 0 && c.Ready() && rv > c.state.CurrentRV() {
			if err := c.feed.WaitFresh(ctx, rv); err != nil {
				c.metrics.FreshnessTimedOut(cachemetrics.RequestList, err)
				return err
			}
		}
		c.metrics.ReadToStorage(cachemetrics.ListDelegated)
		return c.storage.GetList(ctx, key, opts, listObj)
	}
	preparedKey, err := storage.PrepareKey(c.cfg.ResourcePrefix, key, opts.Recursive)
	if err != nil {
		return err
	}
	rv, err := c.cfg.Versioner.ParseResourceVersion(opts.ResourceVersion)
	if err != nil {
		return err
	}
	if !c.Ready() {
		if delegateWhileNotReady(opts) {
			c.metrics.ReadToStorage(cachemetrics.ListNotReady)
			return c.storage.GetList(ctx, key, opts, listObj)
		}
		_, since, _ := c.state.Readiness()
		return notReadyError(c.clock.Now(), since)
	}
	if at, fromKey, ok := c.pastListPoint(opts, preparedKey); ok {
		// An exact RV, or a later page at its first page's RV: from the
		// snapshot of that state once the cache has it, or etcd when it is
		// gone since the decision.
		if err := c.feed.WaitFresh(ctx, at); err != nil {
			c.metrics.FreshnessTimedOut(cachemetrics.RequestList, err)
			return err
		}
		if err := c.listFromSnapshot(preparedKey, fromKey, at, opts, listObj); !goerrors.Is(err, errNoSnapshot) {
			return err
		}
		c.metrics.ReadToStorage(cachemetrics.ListNoSnapshot)
		return c.storage.GetList(ctx, key, opts, listObj)
	}
	if decision.ConsistentRead {
		if rv, err = c.feed.ConsistentRV(ctx); err != nil {
			if skipConsistentFallback() {
				c.metrics.ConsistentRead(false, cachemetrics.FallbackNo)
				return err
			}
			c.metrics.ReadToStorage(cachemetrics.ListConsistentFallback)
			err = c.storage.GetList(ctx, key, opts, listObj)
			c.metrics.ConsistentRead(err == nil, cachemetrics.FallbackYes)
			return err
		}
	}
	if err := c.feed.WaitFresh(ctx, rv); err != nil {
		if decision.ConsistentRead && storage.IsTooLargeResourceVersion(err) {
			if skipConsistentFallback() {
				c.metrics.FreshnessTimedOut(cachemetrics.RequestList, err)
				c.metrics.ConsistentRead(false, cachemetrics.FallbackSkipped)
				return errors.NewTooManyRequests(err.Error(), tooLargeRVRetrySeconds)
			}
			c.metrics.ReadToStorage(cachemetrics.ListConsistentFallback)
			err = c.storage.GetList(ctx, key, opts, listObj)
			c.metrics.ConsistentRead(err == nil, cachemetrics.FallbackYes)
			return err
		}
		c.metrics.FreshnessTimedOut(cachemetrics.RequestList, err)
		if decision.ConsistentRead {
			c.metrics.ConsistentRead(false, cachemetrics.FallbackNo)
		}
		return err
	}
	err = c.listFromCache(ctx, preparedKey, opts, listObj)
	if decision.ConsistentRead {
		c.metrics.ConsistentRead(err == nil, cachemetrics.FallbackNo)
	}
	return err
}

// tooLargeRVRetrySeconds is the Retry-After of a read the cache could not
// catch up for in time (upstream's resourceVersionTooHighRetrySeconds).
const tooLargeRVRetrySeconds = 1

// skipConsistentFallback is whether the operator turned on
// ConsistentListFromCacheSkipTimeoutFallback: a consistent list the cache
// cannot serve is answered 429, for the client to retry, instead of being
// sent to etcd, so a cache that falls behind does not turn every consistent
// list into a full etcd range read. Upstream honours the gate for a cache
// that timed out catching up; with it on, watchkeeper also sends no list to
// etcd when etcd's current revision could not be read (upstream answers
// that one with the error too).
func skipConsistentFallback() bool {
	return utilfeature.DefaultFeatureGate.Enabled(features.ConsistentListFromCacheSkipTimeoutFallback)
}

// delegateWhileNotReady: a paginated list with no selectors is cheap for
// etcd, so it does not need the cache (upstream's rule, KEP-4568).
func delegateWhileNotReady(opts storage.ListOptions) bool {
	pred := opts.Predicate
	return (pred.Label == nil || pred.Label.Empty()) && (pred.Field == nil || pred.Field.Empty()) && pred.Limit > 0
}

// snapshotHelper tells upstream's delegator which lists the cache's
// snapshots can serve: an exact RV, or a continue token's RV, that a
// snapshot still covers and the cache has reached.
type snapshotHelper struct{ c *Cacher }

func (h snapshotHelper) ShouldDelegateExactRV(rv string, recursive bool) (delegator.Result, error) {
	if !recursive {
		return delegator.Result{ShouldDelegate: true}, nil
	}
	parsed, err := h.c.cfg.Versioner.ParseResourceVersion(rv)
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
	if rv > h.c.state.CurrentRV() {
		return delegator.Result{ShouldDelegate: !delegator.ConsistentReadSupported()}
	}
	return delegator.Result{ShouldDelegate: !h.c.state.HasStateAt(rv, h.c.storage.CompactRevision())}
}

func (h snapshotHelper) ShouldDelegateContinue(token string, recursive bool) (delegator.Result, error) {
	if !recursive {
		return delegator.Result{ShouldDelegate: true}, nil
	}
	_, rv, err := storage.DecodeContinue(token, h.c.cfg.ResourcePrefix)
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
	if !c.state.SnapshotsOn() || !opts.Recursive {
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
	parsed, err := c.cfg.Versioner.ParseResourceVersion(opts.ResourceVersion)
	if err != nil || parsed == 0 {
		return 0, "", false
	}
	return parsed, key, true
}
