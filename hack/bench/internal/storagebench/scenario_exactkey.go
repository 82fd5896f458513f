package storagebench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/klog/v2"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
	"github.com/watchkeeper/watchkeeper/internal/fixtures"
	"github.com/watchkeeper/watchkeeper/internal/histogram"
)

// exactKeySeed fixes which objects the writes hit, so both caches get the
// same writes in the same order.
const exactKeySeed = 13

// ExactKey is the kubelet shape (issue 13.1): watchers exact-key watches,
// each of one object's key, spread round-robin over objects pods, then
// writes updates of random objects. It reports the process CPU per write
// across the write phase and whether every watcher got exactly its object's
// events.
//
// Each watch is what the generic registry makes of kubelet's watch of a
// Secret by name (?fieldSelector=metadata.name=N in its namespace): the
// object's key, Recursive false, a metadata.name field selector, the
// namespace in the request context, bookmarks allowed. The writes go
// straight to etcd (podWriter); each cache learns of them from its watch.
func ExactKey(ctx context.Context, env Env, decorator string, watchers, objects, writes int) ([]result.Result, error) {
	rec := result.NewRecorder("exactkey", Level, decorator, map[string]int{"watchers": watchers, "objects": objects, "events": writes})
	raw, rawDestroy, err := openRawStorage(env)
	if err != nil {
		return nil, err
	}
	defer rawDestroy()
	setupStart := time.Now()
	// Object `objects` is the sentinel, written once after every write: when
	// its watcher has it, the cache has applied every write before it.
	if err := writePods(ctx, raw, objects+1, setupWriters, func(i int) *example.Pod {
		return benchPod(exactKeyName(i), time.Time{})
	}); err != nil {
		return nil, fmt.Errorf("creating %d objects: %w", objects+1, err)
	}
	setup := time.Since(setupStart)
	pw, err := newPodWriter(env)
	if err != nil {
		return nil, err
	}
	defer pw.close()
	s, destroy, err := openStorage(ctx, env, decorator)
	if err != nil {
		return nil, err
	}
	defer destroy()
	if err := waitForObjects(ctx, s, objects+1); err != nil {
		return nil, err
	}
	rv, _, err := currentRV(ctx, s)
	if err != nil {
		return nil, err
	}

	// The writes, and what each object's watchers are owed.
	rng := rand.New(rand.NewPCG(exactKeySeed, uint64(objects)))
	targets := make([]int, writes)
	owed := make([]int64, objects)
	for k := range targets {
		targets[k] = rng.IntN(objects)
		owed[targets[k]]++
	}
	var expected int64
	for i := range watchers {
		expected += owed[i%objects]
	}

	var (
		latencies histogram.Histogram
		got       = make([]atomic.Int64, watchers)
		wrong     atomic.Int64 // events of another object, or not MODIFIED
		delivered atomic.Int64
		allIn     = make(chan struct{})
		sentinel  = make(chan struct{})
		slot      int
	)
	if expected == 0 {
		close(allIn)
	}
	newHandler := func() eventHandler {
		i := slot
		slot++
		if i == watchers { // the sentinel's watcher
			var once atomic.Bool
			return func(watch.Event) {
				if once.CompareAndSwap(false, true) {
					close(sentinel)
				}
			}
		}
		name := exactKeyName(i % objects)
		return func(ev watch.Event) {
			now := time.Now()
			m, err := meta.Accessor(ev.Object)
			if err != nil || ev.Type != watch.Modified || m.GetName() != name {
				wrong.Add(1)
				return
			}
			if written, ok := writtenAt(ev); ok {
				latencies.Record(now.Sub(written))
			}
			got[i].Add(1)
			if delivered.Add(1) == expected {
				close(allIn)
			}
		}
	}
	watchCtx := request.WithNamespace(ctx, benchNamespace)
	openStart := time.Now()
	f := newFleet(watchers + 1)
	err = f.openEach(watchCtx, s, watchers+1, func(i int) (string, storage.ListOptions) {
		j := objects // the sentinel
		if i < watchers {
			j = i % objects
		}
		return exactKeyWatch(exactKeyName(j), rv)
	}, newHandler)
	openTime := time.Since(openStart)
	defer f.stop()
	if err != nil {
		return nil, err
	}
	waitGoroutinesSettle(500*time.Millisecond, 5*time.Second)
	runtime.GC()

	stopProfile := profileWindow(env.WindowProfile)
	writeStart, cpuStart := time.Now(), cpuSeconds()
	var k atomic.Int64
	if err := runWriters(fanOutWriters, func() error {
		for {
			n := int(k.Add(1)) - 1
			if n >= writes {
				return nil
			}
			if _, err := pw.put(ctx, benchPod(exactKeyName(targets[n]), time.Time{})); err != nil {
				return err
			}
		}
	}); err != nil {
		return nil, err
	}
	writeTime := time.Since(writeStart)
	if _, err := pw.put(ctx, benchPod(exactKeyName(objects), time.Time{})); err != nil {
		return nil, err
	}
	complete := waitClosed(ctx, &delivered, stallTimeout, allIn, sentinel)
	wall, cpu := time.Since(writeStart), cpuSeconds()-cpuStart
	stopProfile()
	if !complete {
		klog.InfoS("Exact-key delivery did not complete", "delivered", delivered.Load(), "expected", expected)
	}
	f.report()

	var missing, extra int64
	for i := range watchers {
		d := got[i].Load() - owed[i%objects]
		if d < 0 {
			missing -= d
		} else {
			extra += d
		}
	}
	extra += wrong.Load()
	if missing > 0 || extra > 0 {
		klog.InfoS("Exact-key watchers got the wrong events", "missing", missing, "extra", extra, "wrongObject", wrong.Load())
	}
	rec.Add("cpu_ms_per_write", cpu/float64(writes)*1000, "ms", result.Lower)
	rec.Add("events_expected", float64(expected), "events", "")
	rec.Add("events_missing", float64(missing), "events", result.Lower)
	rec.Add("events_extra", float64(extra), "events", result.Lower)
	rec.Add("latency_p50_ms", ms(latencies.Quantile(0.50)), "ms", result.Lower)
	rec.Add("latency_p99_ms", ms(latencies.Quantile(0.99)), "ms", result.Lower)
	rec.Add("watchers_closed", float64(f.closed.Load()), "watchers", result.Lower)
	rec.Add("window_seconds", wall.Seconds(), "s", "")
	rec.Add("write_seconds", writeTime.Seconds(), "s", result.Lower)
	rec.Add("open_seconds", openTime.Seconds(), "s", result.Lower)
	rec.Add("setup_seconds", setup.Seconds(), "s", "")
	return rec.Results(), nil
}

func exactKeyName(i int) string { return fmt.Sprintf("obj-%d", i) }

// exactKeyWatch is the key and options the generic registry's
// WatchPredicate passes to storage for a watch of one object by name.
func exactKeyWatch(name, rv string) (string, storage.ListOptions) {
	pred := storage.SelectionPredicate{
		Label:               labels.Everything(),
		Field:               fields.OneTermEqualSelector("metadata.name", name),
		GetAttrs:            fixtures.PodAttrs,
		IndexFields:         []string{"spec.nodeName"},
		AllowWatchBookmarks: true,
	}
	return resourcePrefix + benchNamespace + "/" + name,
		storage.ListOptions{ResourceVersion: rv, Recursive: false, Predicate: pred}
}
