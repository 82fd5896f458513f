package feed

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/storage"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachemetrics"
)

// The memory budget (--watch-cache-max-bytes). While cached, the reflector
// measures the resource every BudgetCheckPeriod with the store's size
// estimate (the serialized size of each key etcd sent it, summed over the
// cache's keys: no extra read of etcd). Past the budget the cache goes over:
// in one exclusive hold of the state it lets go of its objects, history and
// snapshots, and the Cacher takes its watchers out of the fan-out and
// continues each from an etcd watch from the position it reached
// (HandOver); the reflector stops watching; reads and new watches go to
// etcd. While over, the reflector counts the resource in etcd each period
// (a list of one object, whose remaining count etcd gives) and, once the
// count times the last average size is at most nine tenths of the budget,
// lists again: the cache is back, and the next measure decides afresh.
//
// Why a count while over: the size estimate walks the cache's keys, which
// it no longer holds, and a full list each period would cost etcd what the
// budget is meant to spare the server. The count misses objects that only
// grew; they are measured again after the relist.

// errOverBudget ends the reflector's list and watch: the resource went
// over its budget.
var errOverBudget = errors.New("over its memory budget")

// budget is the budget's decisions, pure: the reflector goroutine feeds it
// measures and counts and acts on its answers.
type budget struct {
	max int64
	// avg is the average serialized size of an object at the last measure
	// that knew one; count the objects at the last measure or count.
	avg, count int64
	over       bool
}

// fitsAgain is the share of the budget a resource over it must fall to
// before it is cached again: a resource hovering at the budget would
// otherwise list, go over and let go over and over.
const fitsAgainNum, fitsAgainDen = 9, 10

// measured takes a measure of the cached resource and says whether it just
// went over the budget. An average of 0 (no size known yet) keeps the last.
func (b *budget) measured(count, avg int64) (wentOver bool) {
	b.count = count
	if avg > 0 {
		b.avg = avg
	}
	if !b.over && b.bytes() > b.max {
		b.over = true
		return true
	}
	return false
}

// counted takes a count of the resource in etcd while over the budget and
// says whether it fits again.
func (b *budget) counted(count int64) (fits bool) {
	b.count = count
	if b.over && b.bytes() <= b.fitsBelow() {
		b.over = false
		return true
	}
	return false
}

// fitsBelow is the size at or below which a resource over the budget is
// cached again.
func (b *budget) fitsBelow() int64 { return b.max / fitsAgainDen * fitsAgainNum }

// bytes is the resource's size by the last measure or count.
func (b *budget) bytes() int64 { return b.count * b.avg }

// OverBudget is whether the resource is over its budget: not cached,
// served from etcd. It turns true and back in exclusive holds of the
// state's lock, so a reader holding the read lock sees it agree with the
// state.
func (f *Feed) OverBudget() bool { return f.overBudget.Load() }

// BudgetStats is the resource's size by the budget's last measure or
// count, for storage.Interface's Stats while over the budget (the store's
// estimate counts the cache's keys, which it no longer holds).
func (f *Feed) BudgetStats() storage.Stats {
	return storage.Stats{ObjectCount: f.budgetCount.Load(), EstimatedAverageObjectSizeBytes: f.budgetAvg.Load()}
}

// BudgetBytes is the resource's size by the budget's last measure or
// count (0 with no budget).
func (f *Feed) BudgetBytes() int64 { return f.budgetCount.Load() * f.budgetAvg.Load() }

// budgetTicker is the budget's period, or nil with no budget.
func (f *Feed) budgetTicker() (<-chan time.Time, func()) {
	if f.cfg.MaxBytes <= 0 {
		return nil, func() {}
	}
	t := f.clock.NewTicker(f.cfg.BudgetCheckPeriod)
	return t.C(), t.Stop
}

// measureBudget measures the cached resource; errOverBudget once it is
// over. A measure that fails is logged and skipped: the budget is a bound
// on memory, not a reason to stop caching.
func (f *Feed) measureBudget(ctx context.Context) error {
	if f.cfg.MaxBytes <= 0 {
		return nil
	}
	stats, err := f.storage.Stats(context.WithValue(ctx, measuringKey{}, true))
	if err != nil {
		f.logger.V(2).Info("Could not measure the watch cache against its memory budget", "err", err)
		return nil
	}
	wentOver := f.budget.measured(stats.ObjectCount, stats.EstimatedAverageObjectSizeBytes)
	f.publishBudget()
	if wentOver {
		return errOverBudget
	}
	return nil
}

// measuringKey marks the context of the budget's measure: the store's
// estimate asks the cache for its keys (storage.KeysFunc), and the Cacher
// gives them at once rather than wait until it caught up with etcd, which
// would wait on the reflector that is measuring.
type measuringKey struct{}

// Measuring is whether ctx is the budget's measure's.
func Measuring(ctx context.Context) bool { return ctx.Value(measuringKey{}) != nil }

func (f *Feed) publishBudget() {
	f.budgetCount.Store(f.budget.count)
	f.budgetAvg.Store(f.budget.avg)
	f.metrics.Budget.EstimatedBytes.Set(float64(f.budget.bytes()))
}

// serveFromStorage is the reflector while the resource is over its budget:
// it lets go of the state, hands the watchers to etcd, and counts the
// resource each period until it fits again (true) or the cache stops.
func (f *Feed) serveFromStorage(ctx context.Context) bool {
	f.GoNotReady(cachemetrics.NotReadyOverBudget, func() {
		f.overBudget.Store(true)
		f.handOver()
		if err := f.state.ReleaseLocked(); err != nil {
			f.logger.Error(err, "Watch cache over its memory budget could not let go of its objects")
		}
	})
	f.metrics.Budget.OverBudget.Set(1)
	f.logger.Info("Watch cache over its memory budget: serving the resource from etcd until it fits again",
		"maxBytes", f.cfg.MaxBytes, "estimatedBytes", f.budget.bytes(), "objects", f.budget.count,
		"averageObjectBytes", f.budget.avg, "fitsBelowBytes", f.budget.fitsBelow())
	t := f.clock.NewTicker(f.cfg.BudgetCheckPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C():
		}
		count, err := f.countStorage(ctx)
		if err != nil {
			f.logger.V(2).Info("Could not count the resource in etcd while over the memory budget", "err", err)
			continue
		}
		fits := f.budget.counted(count)
		f.publishBudget()
		if fits {
			f.logger.Info("Resource fits its memory budget again: caching it",
				"maxBytes", f.cfg.MaxBytes, "estimatedBytes", f.budget.bytes(), "objects", count)
			return true
		}
	}
}

// countStorage is how many objects etcd holds of the resource: a list of
// one object, as etcd counts the rest for a list without selectors.
func (f *Feed) countStorage(ctx context.Context) (int64, error) {
	list := f.cfg.NewListFunc()
	opts := storage.ListOptions{
		Recursive: true,
		Predicate: storage.SelectionPredicate{Label: labels.Everything(), Field: fields.Everything(), Limit: 1},
	}
	if err := f.storage.GetList(ctx, f.cfg.ResourcePrefix, opts, list); err != nil {
		return 0, err
	}
	listMeta, err := meta.ListAccessor(list)
	if err != nil {
		return 0, err
	}
	n := int64(meta.LenList(list))
	if rest := listMeta.GetRemainingItemCount(); rest != nil {
		n += *rest
	} else if listMeta.GetContinue() != "" {
		return 0, fmt.Errorf("etcd gave no count of the rest of %v", f.cfg.GroupResource)
	}
	return n, nil
}

// cachedAgain runs in the relist's exclusive hold that makes the state
// ready: from here on reads and watches are the cache's again.
func (f *Feed) cachedAgain() {
	if f.overBudget.CompareAndSwap(true, false) {
		f.metrics.Budget.OverBudget.Set(0)
	}
}
