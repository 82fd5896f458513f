package storagebench

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	apisharding "k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/sharding"
	"k8s.io/apiserver/pkg/storage"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
	"github.com/watchkeeper/watchkeeper/internal/fixtures"
	"github.com/watchkeeper/watchkeeper/internal/histogram"
)

// shardedSeed fixes the objects' UIDs, so both caches get the same objects
// in the same shards.
const shardedSeed = 1238

// shardedStrayWait is how long after the last owed event the watchers are
// still read for events outside their shard, which a cache that filters
// wrongly may deliver after the right ones.
const shardedStrayWait = time.Second

// Sharded is sharded list and watch as kube-state-metrics' shards run it
// (gate ShardedListAndWatch): watchers watches of the whole resource, watch i
// with the shard selector of the i-th of watchers equal ranges of the UID
// hash space (shardRanges), then events creates of objects with random
// UUID-like UIDs (shardedUID), from a writer process (WriterCommand) so the
// CPU figure is the cache's and its clients' alone. Each object is owed to
// exactly one watcher, the one whose range holds FNV-1a 64 of its UID, read
// here independently of either cache (uidHash).
//
// It reports delivery throughput (events owed and delivered, over the span
// from the first write until the last delivery), write-to-receipt latency,
// the process's CPU over that span, events missing (owed, not delivered),
// events outside the receiving watcher's shard (a failure: the cache's
// filter let through an object the selector excludes) and duplicates, and how
// many watchers got exactly their shard.
func Sharded(ctx context.Context, env Env, decorator string, watchers, events int) ([]result.Result, error) {
	rec := result.NewRecorder("sharded", Level, decorator, map[string]int{"watchers": watchers, "events": events})
	if watchers <= 0 || events <= 0 {
		return nil, fmt.Errorf("sharded: %d watchers, %d events", watchers, events)
	}
	if !utilfeature.DefaultFeatureGate.Enabled(features.ShardedListAndWatch) {
		// A selector is then ignored and every watcher gets everything.
		return nil, fmt.Errorf("sharded: feature gate %s is off", features.ShardedListAndWatch)
	}
	ranges := shardRanges(watchers)
	selectors := make([]apisharding.Selector, watchers)
	for i, r := range ranges {
		sel, err := shardSelector(r)
		if err != nil {
			return nil, err
		}
		selectors[i] = sel
	}
	owed := make([]int64, watchers)
	for i := range events {
		owed[shardOf(ranges, uidHash(shardedUID(shardedSeed, i)))]++
	}
	writer, err := startWriter(env)
	if err != nil {
		return nil, err
	}
	defer writer.stop()
	s, opts, destroy, err := openForFleet(ctx, env, decorator)
	if err != nil {
		return nil, err
	}
	defer destroy()

	var (
		latencies histogram.Histogram
		got       = make([]atomic.Int64, watchers) // events of the watcher's shard
		wrong     = make([]atomic.Int64, watchers) // events outside it (or, none expected, not ADDED)
		delivered atomic.Int64
		// lastReceipt has one slot per watch, written only by its
		// consumer (as in FanOut).
		lastReceipt = make([]atomic.Int64, watchers)
		slot        int
	)
	newHandler := func() eventHandler {
		i := slot
		slot++
		r := ranges[i]
		return func(ev watch.Event) {
			now := time.Now()
			m, err := meta.Accessor(ev.Object)
			if err != nil || ev.Type != watch.Added || !r.contains(uidHash(m.GetUID())) {
				wrong[i].Add(1)
				return
			}
			if written, ok := writtenAt(ev); ok {
				latencies.Record(now.Sub(written))
			}
			got[i].Add(1)
			delivered.Add(1)
			lastReceipt[i].Store(now.UnixNano())
		}
	}
	f := newFleet(watchers)
	openStart := time.Now()
	err = f.openEach(ctx, s, watchers, func(i int) (string, storage.ListOptions) {
		o := opts
		o.Predicate = shardedPredicate(selectors[i])
		return resourcePrefix, o
	}, newHandler)
	openTime := time.Since(openStart)
	defer f.stop()
	if err != nil {
		return nil, err
	}
	waitGoroutinesSettle(500*time.Millisecond, 5*time.Second)

	runtime.GC()
	firstWrite, cpuStart := time.Now(), cpuSeconds()
	writeTime, err := writer.do(shardedBatch{first: 0, count: events, seed: shardedSeed})
	if err != nil {
		return nil, err
	}
	complete := waitFor(ctx, &delivered, stallTimeout, func() bool { return delivered.Load() >= int64(events) })
	cpu := cpuSeconds() - cpuStart
	if !complete {
		klog.InfoS("Sharded delivery did not complete", "delivered", delivered.Load(), "of", events)
	}
	n, last := delivered.Load(), int64(0)
	for i := range lastReceipt {
		last = max(last, lastReceipt[i].Load())
	}
	// Strays are counted a while longer; the figures above are taken.
	time.Sleep(shardedStrayWait)
	f.report()

	c := countShards(owed, got, wrong)
	if c.missing > 0 || c.duplicates > 0 || c.wrongShard > 0 {
		klog.InfoS("Sharded watchers got the wrong events", "missing", c.missing, "duplicates", c.duplicates, "wrongShard", c.wrongShard, "exactWatchers", c.exact, "of", watchers)
	}
	if span := time.Duration(last - firstWrite.UnixNano()); n > 0 && span > 0 {
		rec.Add("events_per_second", float64(n)/span.Seconds(), "events/s", result.Higher)
	}
	rec.Add("latency_p50_ms", ms(latencies.Quantile(0.50)), "ms", result.Lower)
	rec.Add("latency_p99_ms", ms(latencies.Quantile(0.99)), "ms", result.Lower)
	// From the first write until every owed event was delivered (or
	// delivery stalled): the cache's decoding, its filtering of each event
	// for the watchers, and the consumers.
	rec.Add("cpu_seconds", cpu, "s", result.Lower)
	rec.Add("cpu_us_per_event", cpu*1e6/float64(events), "us", result.Lower)
	rec.Add("events_missing", float64(c.missing), "events", result.Lower)
	rec.Add("events_wrong_shard", float64(c.wrongShard), "events", result.Lower)
	rec.Add("events_duplicate", float64(c.duplicates), "events", result.Lower)
	rec.Add("watchers_exact", float64(c.exact), "watchers", result.Higher)
	rec.Add("shard_events_min", float64(c.minOwed), "events", "")
	rec.Add("shard_events_max", float64(c.maxOwed), "events", "")
	rec.Add("watchers_closed", float64(f.closed.Load()), "watchers", result.Lower)
	rec.Add("write_seconds", writeTime.Seconds(), "s", result.Lower)
	rec.Add("open_seconds", openTime.Seconds(), "s", result.Lower)
	return rec.Results(), nil
}

// shardSelector is r's selector as the registry makes it of ?shardSelector=:
// parsed by the apiserver's own parser.
func shardSelector(r shardRange) (apisharding.Selector, error) {
	sel, err := sharding.Parse(r.selector())
	if err != nil {
		return nil, fmt.Errorf("shard selector %q: %w", r.selector(), err)
	}
	return sel, nil
}

// shardedPredicate is what the generic registry's pods store passes to
// storage for a watch of every pod with a shard selector: no label or field
// selector, the pods' attributes and nodeName index field, bookmarks.
func shardedPredicate(sel apisharding.Selector) storage.SelectionPredicate {
	return storage.SelectionPredicate{
		Label:               labels.Everything(),
		Field:               fields.Everything(),
		GetAttrs:            fixtures.PodAttrs,
		IndexFields:         []string{"spec.nodeName"},
		AllowWatchBookmarks: true,
		ShardSelector:       sel,
	}
}

// shardedPod is object i of the sharded scenario, with its UID.
func shardedPod(seed uint64, i int) *example.Pod {
	pod := benchPod(shardedName(i), time.Time{})
	pod.UID = shardedUID(seed, i)
	return pod
}

// shardCounts is what the sharded watchers got against what they were owed.
type shardCounts struct {
	// missing are owed events not delivered; duplicates, events of a
	// watcher's shard delivered more often than owed; wrongShard, events
	// outside the receiving watcher's shard (and any event not ADDED: the
	// scenario only creates).
	missing, duplicates, wrongShard int64
	// exact counts the watchers that got exactly their shard's events.
	exact int
	// minOwed and maxOwed are the smallest and largest shard.
	minOwed, maxOwed int64
}

// countShards compares, watcher by watcher, the events got (of the
// watcher's shard) and wrong (outside it) with those owed.
func countShards(owed []int64, got, wrong []atomic.Int64) shardCounts {
	var c shardCounts
	for i, o := range owed {
		g, w := got[i].Load(), wrong[i].Load()
		if g < o {
			c.missing += o - g
		} else {
			c.duplicates += g - o
		}
		c.wrongShard += w
		if g == o && w == 0 {
			c.exact++
		}
		if i == 0 || o < c.minOwed {
			c.minOwed = o
		}
		c.maxOwed = max(c.maxOwed, o)
	}
	return c
}
