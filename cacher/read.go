package cacher

import (
	"context"
	goerrors "errors"
	"fmt"
	"iter"
	"reflect"
	"sort"

	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/cacher/delegator"
	upstream "k8s.io/apiserver/pkg/storage/cacher/metrics"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
)

// Get implements storage.Interface. Any RV but "" is served from the cache
// at or above it. RV "" goes to etcd, as upstream does: a consistent read of
// one key costs etcd about what the progress request to catch the cache up
// would, and etcd also knows objects stored under a key other than the one
// KeyFunc gives them, which the conformance suite relies on.
func (c *Cacher) Get(ctx context.Context, key string, opts storage.GetOptions, objPtr runtime.Object) error {
	key, err := storage.PrepareKey(c.resourcePrefix, key, false)
	if err != nil {
		return err
	}
	rv, err := parseRequestRV(c.versioner, opts.ResourceVersion)
	if err != nil {
		return err
	}
	if opts.ResourceVersion == "" {
		c.metrics.readToStorage(getConsistent)
		return c.storage.Get(ctx, key, opts, objPtr)
	}
	if !c.Ready() {
		// Etcd can answer any Get; the cache is only faster.
		c.metrics.readToStorage(getNotReady)
		return c.storage.Get(ctx, key, opts, objPtr)
	}
	if err := c.waitFresh(ctx, rv); err != nil {
		return err
	}
	o, ok, cacheRV := c.state.get(key)
	if !ok {
		if opts.IgnoreNotFound {
			return runtime.SetZeroValue(objPtr)
		}
		return storage.NewKeyNotFoundError(key, int64(cacheRV))
	}
	return setObject(objPtr, o.obj)
}

// GetList implements storage.Interface. Lists the cache can serve exactly
// (RV "0", not-older-than, consistent once the cache caught up) come from
// memory; exact-RV lists and later pages from its snapshots
// (snapshot_list.go) while they hold that RV, else from etcd.
func (c *Cacher) GetList(ctx context.Context, key string, opts storage.ListOptions, listObj runtime.Object) error {
	if _, _, err := storage.ValidateListOptions(c.resourcePrefix, c.versioner, opts); err != nil {
		return err
	}
	var helper delegator.Helper = delegator.CacheWithoutSnapshots{}
	if c.state.snapshotting {
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
		if rv, err := c.versioner.ParseResourceVersion(opts.ResourceVersion); err == nil && rv > 0 && c.Ready() && rv > c.state.currentRV() {
			if err := c.waitFresh(ctx, rv); err != nil {
				c.metrics.freshnessTimedOut(requestList, err)
				return err
			}
		}
		c.metrics.readToStorage(listDelegated)
		return c.storage.GetList(ctx, key, opts, listObj)
	}
	preparedKey, err := storage.PrepareKey(c.resourcePrefix, key, opts.Recursive)
	if err != nil {
		return err
	}
	rv, err := c.versioner.ParseResourceVersion(opts.ResourceVersion)
	if err != nil {
		return err
	}
	if !c.Ready() {
		if delegateWhileNotReady(opts) {
			c.metrics.readToStorage(listNotReady)
			return c.storage.GetList(ctx, key, opts, listObj)
		}
		_, since, _ := c.state.readiness()
		return notReadyError(c.clock.Now(), since)
	}
	if at, fromKey, ok := c.pastListPoint(opts, preparedKey); ok {
		// An exact RV, or a later page at its first page's RV: from the
		// snapshot of that state once the cache has it, or etcd when it is
		// gone since the decision.
		if err := c.waitFresh(ctx, at); err != nil {
			c.metrics.freshnessTimedOut(requestList, err)
			return err
		}
		if err := c.listFromSnapshot(preparedKey, fromKey, at, opts, listObj); !goerrors.Is(err, errNoSnapshot) {
			return err
		}
		c.metrics.readToStorage(listNoSnapshot)
		return c.storage.GetList(ctx, key, opts, listObj)
	}
	if decision.ConsistentRead {
		if rv, err = c.consistentRV(ctx); err != nil {
			if skipConsistentFallback() {
				c.metrics.consistentRead(false, fallbackNo)
				return err
			}
			c.metrics.readToStorage(listConsistentFallback)
			err = c.storage.GetList(ctx, key, opts, listObj)
			c.metrics.consistentRead(err == nil, fallbackYes)
			return err
		}
	}
	if err := c.waitFresh(ctx, rv); err != nil {
		if decision.ConsistentRead && storage.IsTooLargeResourceVersion(err) {
			if skipConsistentFallback() {
				c.metrics.freshnessTimedOut(requestList, err)
				c.metrics.consistentRead(false, fallbackSkipped)
				return errors.NewTooManyRequests(err.Error(), tooLargeRVRetrySeconds)
			}
			c.metrics.readToStorage(listConsistentFallback)
			err = c.storage.GetList(ctx, key, opts, listObj)
			c.metrics.consistentRead(err == nil, fallbackYes)
			return err
		}
		c.metrics.freshnessTimedOut(requestList, err)
		if decision.ConsistentRead {
			c.metrics.consistentRead(false, fallbackNo)
		}
		return err
	}
	err = c.listFromCache(ctx, preparedKey, opts, listObj)
	if decision.ConsistentRead {
		c.metrics.consistentRead(err == nil, fallbackNo)
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

// listLimit is the page size a list from the cache honours. A limit on RV
// "0" is ignored, as upstream's computeListLimit does: such a list accepts
// any state, so the cache answers it whole, later pages included (a
// continue token with RV "0" gets the rest in one page).
func listLimit(opts storage.ListOptions) int64 {
	if opts.ResourceVersion == "0" {
		return 0
	}
	return opts.Predicate.Limit
}

func (c *Cacher) listFromCache(ctx context.Context, key string, opts storage.ListOptions, listObj runtime.Object) error {
	start := key
	if token := opts.Predicate.Continue; token != "" {
		// A continuation at the current state (a negative RV in its token:
		// past states are pastListPoint's): from its key on.
		from, _, err := storage.DecodeContinue(token, key)
		if err != nil {
			return err
		}
		start = from
	}
	walk, hint, index, cacheRV := c.state.listCurrent(ctx, key, start, opts)

	// Later pages carry the RV in their continue token: the snapshot of
	// that state serves them (or etcd, which has its revisions).
	return c.fillList(listObj, walk, hint, index, key, cacheRV, listLimit(opts), opts)
}

// fillList puts into listObj the objects of objs (in key order; about
// sizeHint of them, 0 if unknown) that match the predicate, at most limit
// of them (0: all), with the list's RV and, when more match, the continue
// token that resumes after the last one at the same RV.
func (c *Cacher) fillList(listObj runtime.Object, objs iter.Seq[*object], sizeHint int, index, key string, rv uint64, limit int64, opts storage.ListOptions) error {
	listPtr, err := meta.GetItemsPtr(listObj)
	if err != nil {
		return err
	}
	listVal, err := conversion.EnforcePtr(listPtr)
	if err != nil {
		return err
	}
	if listVal.Kind() != reflect.Slice {
		return fmt.Errorf("need a pointer to slice, got %v", listVal.Kind())
	}
	var p listPage
	if opts.Predicate.Empty() && limit == 0 && sizeHint > 0 {
		p = copyAll(listVal, objs, sizeHint)
	} else {
		p = selectPage(listVal, objs, sizeHint, opts.Predicate, limit)
	}
	upstream.RecordListCacheMetrics(c.groupResource, index, p.fetched, listVal.Len())
	next, remaining, err := storage.PrepareContinueToken(p.lastKey, key, int64(rv), int64(p.total), p.hasMore, opts)
	if err != nil {
		return err
	}
	if err := c.versioner.UpdateList(listObj, rv, next, remaining); err != nil {
		return err
	}
	// A sharded list says which shard it holds, as etcd3's does.
	opts.Predicate.SetShardInfoOnList(listObj)
	return nil
}

// listPage is what filling a list found: the last key listed, how many
// objects it looked at (fetched) and how many there are (total, counted
// only when the continue token's remaining count needs it), and whether
// more match than the limit let in.
type listPage struct {
	lastKey        string
	fetched, total int
	hasMore        bool
}

// copyAll copies every object of objs into the slice listVal, which it
// makes sizeHint long first and fits to the count after. Each object is
// copied as the walk reaches it: no pointers collected for a second pass
// over thousands of objects, each a cache miss again (upstream's cacher
// also copies at once when everything matches).
func copyAll(listVal reflect.Value, objs iter.Seq[*object], sizeHint int) listPage {
	listVal.Set(reflect.MakeSlice(listVal.Type(), sizeHint, sizeHint))
	var p listPage
	for o := range objs {
		if p.fetched < sizeHint {
			listVal.Index(p.fetched).Set(reflect.ValueOf(o.obj).Elem())
		} else {
			listVal.Set(reflect.Append(listVal, reflect.ValueOf(o.obj).Elem()))
		}
		p.fetched++
		p.lastKey = o.key
	}
	listVal.SetLen(p.fetched)
	p.total = p.fetched
	return p
}

// selectPage puts into the slice listVal the objects of objs that match
// pred, at most limit of them (0: all).
func selectPage(listVal reflect.Value, objs iter.Seq[*object], sizeHint int, pred storage.SelectionPredicate, limit int64) listPage {
	if limit > 0 {
		sizeHint = min(sizeHint, int(min(limit, 1<<20)))
	}
	selected := make([]*object, 0, sizeHint)
	var p listPage
	countAll := pred.Empty()
	match := matcherFor(pred)
	for o := range objs {
		p.total++
		if limit > 0 && int64(len(selected)) >= limit {
			p.hasMore = true
			if !countAll {
				break
			}
			continue
		}
		p.fetched++
		if match(o) {
			selected = append(selected, o)
		}
	}
	listVal.Set(reflect.MakeSlice(listVal.Type(), len(selected), len(selected)))
	for i, o := range selected {
		listVal.Index(i).Set(reflect.ValueOf(o.obj).Elem())
		p.lastKey = o.key
	}
	return p
}

// delegateWhileNotReady: a paginated list with no selectors is cheap for
// etcd, so it does not need the cache (upstream's rule, KEP-4568).
func delegateWhileNotReady(opts storage.ListOptions) bool {
	pred := opts.Predicate
	return (pred.Label == nil || pred.Label.Empty()) && (pred.Field == nil || pred.Field.Empty()) && pred.Limit > 0
}

// maxQuotedRV is the most of a malformed resourceVersion an error of the
// cache's own quotes.
const maxQuotedRV = 64

// parseRequestRV parses the resourceVersion of a Get or a watch. A
// malformed one gets the storage's own error (a storage.InvalidError on the
// field), as the etcd3 store and upstream's cache answer: the conformance
// suite pins it, and the registry answers a Get's 422 Invalid (a watch's,
// 500). Past maxQuotedRV bytes it is garbage rather than a mistyped or
// overflowing number, and gets parseRV's 400 instead: the storage's message
// quotes the whole value, twice, into the response and the logs.
func parseRequestRV(v storage.Versioner, rv string) (uint64, error) {
	parsed, err := v.ParseResourceVersion(rv)
	if err != nil && len(rv) > maxQuotedRV {
		return parseRV(v, rv)
	}
	return parsed, err
}

// parseRV parses a client's resourceVersion. A malformed one is the
// client's mistake: 400, as a list already answers, quoting at most
// maxQuotedRV bytes of it.
func parseRV(v storage.Versioner, rv string) (uint64, error) {
	parsed, err := v.ParseResourceVersion(rv)
	if err != nil {
		// Quote at most a prefix: a client's megabyte of garbage does not
		// belong in the response, nor in the logs.
		shown := rv
		if len(shown) > maxQuotedRV {
			shown = shown[:maxQuotedRV] + "..."
		}
		return 0, errors.NewBadRequest(fmt.Sprintf("invalid resource version %q: must be a decimal number", shown))
	}
	return parsed, nil
}

func setObject(objPtr, obj runtime.Object) error {
	dst, err := conversion.EnforcePtr(objPtr)
	if err != nil {
		return err
	}
	src := reflect.ValueOf(obj.DeepCopyObject())
	if src.Kind() == reflect.Pointer {
		src = src.Elem()
	}
	if !src.Type().AssignableTo(dst.Type()) {
		return fmt.Errorf("cannot store %v in %v", src.Type(), dst.Type())
	}
	dst.Set(src)
	return nil
}

func sortObjects(objs []*object) {
	sort.Slice(objs, func(i, j int) bool { return objs[i].key < objs[j].key })
}
