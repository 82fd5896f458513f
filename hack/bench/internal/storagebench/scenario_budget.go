package storagebench

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"

	"github.com/watchkeeper/watchkeeper/cacher"
	"github.com/watchkeeper/watchkeeper/decorator"
	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
	"github.com/watchkeeper/watchkeeper/internal/histogram"
	"github.com/watchkeeper/watchkeeper/options"
)

// WatchkeeperBudget is watchkeeper with a memory budget of a quarter of
// what the budget scenario writes (--watch-cache-max-bytes), so the
// resource goes over it and is served from etcd.
const WatchkeeperBudget = "watchkeeper-budget"

// budgetShare is the budget's share of the bytes the scenario writes.
const budgetShare = 4

// Budget (issue 50, item 2) is what a memory budget saves and costs: it
// writes objects realistic pods, starts the decorator's storage over them,
// waits until it is ready (for WatchkeeperBudget, until it is over its
// budget: serving from etcd), opens one watch, and measures the heap per
// object, a first page of 500 and a whole list at RV "0", and a get at RV
// "0"; then it updates a tenth of the pods and times the watch until it has
// every update (a watch the cache closes resumes from its last event, and
// is counted). Decorator None is no cache (the raw store): the heap floor,
// and what a read from etcd costs.
func Budget(ctx context.Context, env Env, decorator string, objects int) ([]result.Result, error) {
	if objects <= 0 {
		return nil, fmt.Errorf("budget: %d objects", objects)
	}
	k := memoryKinds[RealisticPods]
	pw, bytes, _, err := fillFromEtcd(ctx, env, k, objects)
	if err != nil {
		return nil, err
	}
	// As the memory run's: every pod written twice, compacted after.
	defer pw.closeCompacted("budget")
	rec := result.NewRecorder("budget", Level, decorator, map[string]int{"objects": objects, "object_bytes": bytes / objects})

	start := time.Now()
	s, destroy, err := startBudgetStorage(ctx, env, decorator, objects, int64(bytes/budgetShare))
	if err != nil {
		return nil, err
	}
	defer destroy()
	ready := time.Since(start)
	if err := expectObjects(ctx, s, k.res, "0", objects); err != nil {
		return nil, err
	}
	last, err := listRV(ctx, s, k.res)
	if err != nil {
		return nil, err
	}
	w, err := s.Watch(ctx, resourcePrefix, storage.ListOptions{ResourceVersion: last, Predicate: storage.Everything, Recursive: true})
	if err != nil {
		return nil, err
	}
	defer func() { w.Stop() }()
	waitGoroutinesSettle(500*time.Millisecond, 5*time.Second)
	heap := memStatsAfterGC().HeapAlloc

	var page, whole, get histogram.Histogram
	timed := func(h *histogram.Histogram, n int, read func() error) error {
		for range n {
			t := time.Now()
			if err := read(); err != nil {
				return err
			}
			h.Record(time.Since(t))
		}
		return nil
	}
	pred := storage.Everything
	pred.Limit = 500
	if err := timed(&page, 20, func() error {
		return s.GetList(ctx, resourcePrefix, storage.ListOptions{ResourceVersion: "0", Predicate: pred, Recursive: true}, k.res.newListFunc())
	}); err != nil {
		return nil, err
	}
	if err := timed(&whole, 5, func() error { return expectObjects(ctx, s, k.res, "0", objects) }); err != nil {
		return nil, err
	}
	if err := timed(&get, 200, func() error {
		return s.Get(ctx, resourcePrefix+benchNamespace+"/"+memoryName(objects/2), storage.GetOptions{ResourceVersion: "0"}, k.res.newFunc())
	}); err != nil {
		return nil, err
	}

	// A tenth updated: the watch open before has each.
	updates := max(objects/10, 1)
	updateStart := time.Now()
	_, _, err = writeGeneration(ctx, pw, k, updates, 1)
	if err != nil {
		return nil, err
	}
	// A watch the cache closes (upstream's closes one it blocked on for
	// 100ms) is opened again from its last event, as a reflector resumes.
	closed := 0
	for got := 0; got < updates; {
		select {
		case ev, ok := <-w.ResultChan():
			switch {
			case !ok:
				closed++
				w.Stop()
				if w, err = s.Watch(ctx, resourcePrefix, storage.ListOptions{ResourceVersion: last, Predicate: storage.Everything, Recursive: true}); err != nil {
					return nil, fmt.Errorf("resuming the watch from %s after %d of %d updates: %w", last, got, updates, err)
				}
			case ev.Type == watch.Error:
				return nil, fmt.Errorf("the watch ended after %d of %d updates: %v", got, updates, ev.Object)
			case ev.Type == watch.Modified:
				got++
				if m, err := meta.Accessor(ev.Object); err == nil {
					last = m.GetResourceVersion()
				}
			}
		case <-time.After(time.Minute):
			return nil, fmt.Errorf("the watch had %d of %d updates after a minute", got, updates)
		}
	}
	delivered := time.Since(updateStart)

	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	rec.Add("start_to_ready_seconds", ready.Seconds(), "s", result.Lower)
	rec.Add("heap_bytes_per_object", float64(heap)/float64(objects), "B", result.Lower)
	rec.Add("list_page_500_p50_ms", ms(page.Quantile(0.5)), "ms", result.Lower)
	rec.Add("list_all_p50_ms", ms(whole.Quantile(0.5)), "ms", result.Lower)
	rec.Add("get_p50_ms", ms(get.Quantile(0.5)), "ms", result.Lower)
	rec.Add("updates_delivered_seconds", delivered.Seconds(), "s", result.Lower)
	rec.Add("watch_closed", float64(closed), "closes", result.Lower)
	return rec.Results(), nil
}

// startBudgetStorage is startMemoryStorage, with WatchkeeperBudget built
// with a budget of maxBytes and waited for until it is over it.
func startBudgetStorage(ctx context.Context, env Env, name string, objects int, maxBytes int64) (storage.Interface, func(), error) {
	if name != WatchkeeperBudget {
		return startMemoryStorage(ctx, env, name, corePods, objects)
	}
	o := options.NewWatchCacheOptions()
	o.MaxBytes = maxBytes
	d, err := decorator.New(o)
	if err != nil {
		return nil, nil, err
	}
	s, destroy, err := decorate(env, name, d, corePods)
	if err != nil {
		return nil, nil, err
	}
	c, ok := s.(*cacher.Cacher)
	if !ok {
		destroy()
		return nil, nil, fmt.Errorf("%s: the decorator made a %T", name, s)
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for !c.Inspect(ctx).OverBudget {
		select {
		case <-ctx.Done():
			destroy()
			return nil, nil, fmt.Errorf("%s: not over its budget of %d bytes after %v", name, maxBytes, readyTimeout)
		case <-time.After(10 * time.Millisecond):
		}
	}
	return s, destroy, nil
}

// listRV is the RV of a consistent list of s, the list itself let go of
// before the heap is measured.
func listRV(ctx context.Context, s storage.Interface, res resource) (string, error) {
	list := res.newListFunc()
	if err := s.GetList(ctx, resourcePrefix, storage.ListOptions{ResourceVersion: "", Predicate: storage.Everything, Recursive: true}, list); err != nil {
		return "", err
	}
	listMeta, err := meta.ListAccessor(list)
	if err != nil {
		return "", err
	}
	return listMeta.GetResourceVersion(), nil
}
