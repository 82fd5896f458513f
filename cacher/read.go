package cacher

import (
	"context"
	"fmt"
	"iter"
	"reflect"

	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage"
	upstream "k8s.io/apiserver/pkg/storage/cacher/metrics"

	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
)

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
	walk, hint, index, cacheRV := c.state.ListCurrent(ctx, key, start, opts)

	// Later pages carry the RV in their continue token: the snapshot of
	// that state serves them (or etcd, which has its revisions).
	return c.fillList(listObj, walk, hint, index, key, cacheRV, listLimit(opts), opts)
}

// fillList puts into listObj the objects of objs (in key order; about
// sizeHint of them, 0 if unknown) that match the predicate, at most limit
// of them (0: all), with the list's RV and, when more match, the continue
// token that resumes after the last one at the same RV.
func (c *Cacher) fillList(listObj runtime.Object, objs iter.Seq[*objects.Object], sizeHint int, index, key string, rv uint64, limit int64, opts storage.ListOptions) error {
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
	if p.err != nil {
		return p.err
	}
	upstream.RecordListCacheMetrics(c.cfg.GroupResource, index, p.fetched, listVal.Len())
	next, remaining, err := storage.PrepareContinueToken(p.lastKey, key, int64(rv), int64(p.total), p.hasMore, opts)
	if err != nil {
		return err
	}
	if err := c.cfg.Versioner.UpdateList(listObj, rv, next, remaining); err != nil {
		return err
	}
	// A sharded list says which shard it holds, as etcd3's does.
	opts.Predicate.SetShardInfoOnList(listObj)
	return nil
}

// listPage is what filling a list found: the last key listed, how many
// objects it looked at (fetched) and how many there are (total, counted
// only when the continue token's remaining count needs it), whether
// more match than the limit let in, and the first object it could not read.
type listPage struct {
	lastKey        string
	fetched, total int
	hasMore        bool
	err            error
}

// copyAll copies every object of objs into the slice listVal, which it
// makes sizeHint long first and fits to the count after. Each object is
// copied as the walk reaches it: no pointers collected for a second pass
// over thousands of objects, each a cache miss again (upstream's cacher
// also copies at once when everything matches).
func copyAll(listVal reflect.Value, objs iter.Seq[*objects.Object], sizeHint int) listPage {
	listVal.Set(reflect.MakeSlice(listVal.Type(), sizeHint, sizeHint))
	var p listPage
	for o := range objs {
		obj, err := o.Get()
		if err != nil {
			p.err = err
			break
		}
		if p.fetched < sizeHint {
			listVal.Index(p.fetched).Set(reflect.ValueOf(obj).Elem())
		} else {
			listVal.Set(reflect.Append(listVal, reflect.ValueOf(obj).Elem()))
		}
		p.fetched++
		p.lastKey = o.Key
	}
	listVal.SetLen(p.fetched)
	p.total = p.fetched
	return p
}

// selectPage puts into the slice listVal the objects of objs that match
// pred, at most limit of them (0: all).
func selectPage(listVal reflect.Value, objs iter.Seq[*objects.Object], sizeHint int, pred storage.SelectionPredicate, limit int64) listPage {
	if limit > 0 {
		sizeHint = min(sizeHint, int(min(limit, 1<<20)))
	}
	selected := make([]*objects.Object, 0, sizeHint)
	var p listPage
	countAll := pred.Empty()
	match := objects.MatcherFor(pred)
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
		obj, err := o.Get()
		if err != nil {
			p.err = err
			break
		}
		listVal.Index(i).Set(reflect.ValueOf(obj).Elem())
		p.lastKey = o.Key
	}
	return p
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

// setObject copies the cached object's struct into objPtr, as upstream's
// Get and every list of the cache's do: its maps and slices stay shared
// with the cache, whose objects are never written, and a caller treats what
// storage gives it as read-only, as with upstream's cache. A deep copy per
// Get cost a realistic pod about 6 us, three to five times upstream's Get.
func setObject(objPtr, obj runtime.Object) error {
	dst, err := conversion.EnforcePtr(objPtr)
	if err != nil {
		return err
	}
	src := reflect.ValueOf(obj)
	if src.Kind() == reflect.Pointer {
		src = src.Elem()
	}
	if !src.Type().AssignableTo(dst.Type()) {
		return fmt.Errorf("cannot store %v in %v", src.Type(), dst.Type())
	}
	dst.Set(src)
	return nil
}
