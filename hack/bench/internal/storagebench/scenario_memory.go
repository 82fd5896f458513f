package storagebench

import (
	"context"
	"fmt"
	"os"
	goruntime "runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/klog/v2"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
	"github.com/watchkeeper/watchkeeper/internal/fixtures"
)

// The memory scenario's kinds of object.
const (
	// SmallPods are the pods every other scenario writes (benchPod): an
	// example.Pod of a name, a label, a node and one annotation, under 200
	// bytes as protobuf.
	SmallPods = "small"
	// RealisticPods are core/v1 Pods of 2-4 KB (fixtures.RealisticPod):
	// labels, annotations, containers with env and volume mounts, status.
	RealisticPods = "realistic"
	// CustomResources are the realistic pods' content as a custom
	// resource (bench.watchkeeper.io/v1 Replica) stored as JSON and held as
	// Unstructured, as apiextensions-apiserver holds a CRD's objects.
	CustomResources = "custom"
)

// WatchkeeperUnshared is watchkeeper with --watch-cache-share-siblings=false:
// each cached object holds its own decoded copy, as in upstream's cache.
// The memory scenario runs it to show what the sharing saves and what its
// walk costs the start.
const WatchkeeperUnshared = "watchkeeper-unshared"

// WatchkeeperCompact is watchkeeper with --watch-cache-compact: each cached
// object held serialized and decoded on every read. The memory, list and
// fan-out scenarios run it for what it saves and what its decodes cost.
const WatchkeeperCompact = "watchkeeper-compact"

// MemoryKinds are the memory scenario's kinds, in the order they run.
var MemoryKinds = []string{SmallPods, RealisticPods, CustomResources}

// objectKind is one kind of object the memory scenario fills a resource
// with: its resource, and object i's generation-th version (0 as created).
type objectKind struct {
	res    resource
	object func(i, generation int) runtime.Object
}

var memoryKinds = map[string]objectKind{
	SmallPods: {res: pods, object: func(i, generation int) runtime.Object {
		// The written-at annotation of the other scenarios, at a fixed
		// time: the same bytes in every run, and the same size in every
		// generation.
		return benchPod(memoryName(i), memoryEpoch.Add(time.Duration(generation)*time.Second))
	}},
	RealisticPods: {res: corePods, object: func(i, generation int) runtime.Object {
		return fixtures.RealisticPod(memoryName(i), benchNamespace, i, generation)
	}},
	CustomResources: {res: customResources, object: func(i, generation int) runtime.Object {
		return customResource(fixtures.RealisticPod(memoryName(i), benchNamespace, i, generation))
	}},
}

var memoryEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func memoryName(i int) string { return "mem-" + strconv.Itoa(i) }

// memoryProfileRate is the heap profile's sampling rate in the memory
// scenario: one sample per 64 KiB allocated (the runtime's default is 512
// KiB), so that a holder of a few MB at 10k objects has samples enough.
const memoryProfileRate = 64 << 10

// Memory is the memory per cached object (issue 29.2): it writes objects
// objects of the kind to etcd, then starts the decorator's cache over them
// and times its start until it is ready (its initial list), and measures
// the live heap per object; then it updates every object once, straight in
// etcd, so the history and the snapshots are full, waits until the cache
// has applied every update, and measures the heap again. Decorator None is
// no cache: the raw etcd3 storage, whose start is one list of every object
// from etcd (what any cache's initial list does at least), and whose heap
// is what the process holds without a cache; the parent subtracts it (the
// _net figures). With env.HeapProfile set, a heap profile of the state
// after the updates is written there.
//
// The heap figures are HeapAlloc after two collections, per object; the
// holders (memoryHolders) are the same heap, sampled, split by what holds
// it.
func Memory(ctx context.Context, env Env, decorator string, objects int, kind string) ([]result.Result, error) {
	k, ok := memoryKinds[kind]
	if !ok {
		return nil, fmt.Errorf("memory: unknown kind %q (known: %v)", kind, MemoryKinds)
	}
	if objects <= 0 {
		return nil, fmt.Errorf("memory: %d objects", objects)
	}
	goruntime.MemProfileRate = memoryProfileRate
	pw, bytes, fill, err := fillFromEtcd(ctx, env, k, objects)
	if err != nil {
		return nil, err
	}
	// The run writes every object twice (600 MB of values for 100k
	// realistic pods), and the bench's one etcd keeps every revision. Once
	// the cache is gone (deferred after this), compacting lets the runs
	// after this one reuse the space, under etcd's quota.
	defer pw.closeCompacted("memory")
	rec := result.NewRecorder("memory", Level, decorator, map[string]int{"objects": objects, "object_bytes": bytes / objects})

	start := time.Now()
	s, destroy, err := startMemoryStorage(ctx, env, decorator, k.res, objects)
	if err != nil {
		return nil, err
	}
	defer destroy()
	ready := time.Since(start)
	if err := expectObjects(ctx, s, k.res, "0", objects); err != nil {
		return nil, err
	}
	waitGoroutinesSettle(500*time.Millisecond, 5*time.Second)
	filled := memStatsAfterGC().HeapAlloc
	filledHolders := heapHolders()

	updateStart := time.Now()
	_, lastRV, err := writeGeneration(ctx, pw, k, objects, 1)
	if err != nil {
		return nil, fmt.Errorf("updating %d objects: %w", objects, err)
	}
	update := time.Since(updateStart)
	if decorator != None {
		if err := waitFresh(ctx, s, k.res, lastRV); err != nil {
			return nil, err
		}
	}
	applied := time.Since(updateStart)
	if err := expectObjects(ctx, s, k.res, "0", objects); err != nil {
		return nil, err
	}
	waitGoroutinesSettle(500*time.Millisecond, 5*time.Second)
	updated := memStatsAfterGC().HeapAlloc
	holders := splitTree(filledHolders, heapHolders())
	logHolders("after the fill", filledHolders, objects)
	logHolders("after the updates", holders, objects)
	if env.HeapProfile != "" {
		if err := writeHeapProfile(env.HeapProfile); err != nil {
			return nil, err
		}
	}

	per := func(b uint64) float64 { return float64(b) / float64(objects) }
	rec.Add("start_to_ready_seconds", ready.Seconds(), "s", result.Lower)
	rec.Add("heap_bytes_per_object_filled", per(filled), "B", result.Lower)
	rec.Add("heap_bytes_per_object_updated", per(updated), "B", result.Lower)
	rec.Add("fill_seconds", fill.Seconds(), "s", "")
	// The updates are in the history only if they came within its window
	// (75s by default): at most that long, or both caches keep less.
	rec.Add("update_seconds", update.Seconds(), "s", "")
	rec.Add("update_applied_seconds", applied.Seconds(), "s", result.Lower)
	for _, h := range Holders {
		rec.Add(HolderMetric(h), per(uint64(holders[h])), "B", result.Lower)
	}
	// 2 when the cache holds every object's version before the update
	// as well as the current one (the history's and the snapshots' past
	// states); 1 when it holds only the current ones.
	if filledHolders[HolderDecoded] > 0 {
		// (Not a number, which results.jsonl cannot hold, when no
		// decode frame holds the kind's objects.)
		rec.Add("decoded_versions_held", holders[HolderDecoded]/filledHolders[HolderDecoded], "versions", "")
	}
	return rec.Results(), nil
}

// startMemoryStorage starts the decorator's storage of res and returns once
// it is ready: for a cache, once ReadinessCheck passes, polled every
// millisecond; for None, once one list of every object (objects of them)
// came from etcd.
func startMemoryStorage(ctx context.Context, env Env, decorator string, res resource, objects int) (storage.Interface, func(), error) {
	if decorator == None {
		s, destroy, err := openRawStorageOf(env, res)
		if err != nil {
			return nil, nil, err
		}
		if err := expectObjects(ctx, s, res, "", objects); err != nil {
			destroy()
			return nil, nil, err
		}
		return s, destroy, nil
	}
	s, destroy, err := buildCache(env, decorator, res)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for s.ReadinessCheck() != nil {
		select {
		case <-ctx.Done():
			destroy()
			return nil, nil, fmt.Errorf("%s cache not ready after %v", decorator, readyTimeout)
		case <-time.After(time.Millisecond):
		}
	}
	return s, destroy, nil
}

// fillFromEtcd opens a writer of env and writes objects objects of kind k
// into etcd (generation 0), as the memory and budget runs start: the
// writer (the caller defers its closeCompacted), the bytes written and how
// long the writes took.
func fillFromEtcd(ctx context.Context, env Env, k objectKind, objects int) (*podWriter, int, time.Duration, error) {
	pw, err := newPodWriter(env)
	if err != nil {
		return nil, 0, 0, err
	}
	start := time.Now()
	bytes, _, err := writeGeneration(ctx, pw, k, objects, 0)
	if err != nil {
		pw.close()
		return nil, 0, 0, fmt.Errorf("filling %d objects: %w", objects, err)
	}
	return pw, bytes, time.Since(start), nil
}

// writeGeneration writes every object's generation from setupWriters
// concurrent writers, straight to etcd, and returns the bytes written and
// the highest revision etcd gave a write.
func writeGeneration(ctx context.Context, pw *podWriter, k objectKind, objects, generation int) (bytes int, lastRV uint64, err error) {
	var (
		next  atomic.Int64
		total atomic.Int64
		mu    sync.Mutex
	)
	err = runWriters(setupWriters, func() error {
		for {
			i := int(next.Add(1)) - 1
			if i >= objects {
				return nil
			}
			rv, n, err := pw.putObject(ctx, k.res.codec, k.object(i, generation))
			if err != nil {
				return err
			}
			total.Add(int64(n))
			mu.Lock()
			lastRV = max(lastRV, rv)
			mu.Unlock()
		}
	})
	return int(total.Load()), lastRV, err
}

// expectObjects lists s at rv and fails unless it holds want objects.
func expectObjects(ctx context.Context, s storage.Interface, res resource, rv string, want int) error {
	list := res.newListFunc()
	if err := s.GetList(ctx, resourcePrefix, storage.ListOptions{ResourceVersion: rv, Predicate: storage.Everything, Recursive: true}, list); err != nil {
		return fmt.Errorf("list at RV %q: %w", rv, err)
	}
	if got := meta.LenList(list); got != want {
		return fmt.Errorf("list at RV %q holds %d objects, want %d", rv, got, want)
	}
	return nil
}

// nothingSelected is a label selector no object matches: a list with it
// waits for the cache to reach its RV like any list, and copies nothing.
var nothingSelected = labels.SelectorFromSet(labels.Set{"bench.watchkeeper.io/none": "none"})

// waitFresh returns once a list from s at resourceVersion rv or later
// succeeds: the cache has applied every write up to rv. A cache further
// behind than it waits answers with an error, and the list is tried again.
func waitFresh(ctx context.Context, s storage.Interface, res resource, rv uint64) error {
	pred := storage.Everything
	pred.Label = nothingSelected
	opts := storage.ListOptions{ResourceVersion: strconv.FormatUint(rv, 10), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		Predicate: pred, Recursive: true}
	for {
		err := s.GetList(ctx, resourcePrefix, opts, res.newListFunc())
		if err == nil {
			return nil
		}
		klog.V(2).InfoS("Cache not at the last write yet", "rv", rv, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("cache never reached RV %d: %w", rv, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// logHolders logs the bytes per object of each holder, for the run's log
// (the results carry those after the updates).
func logHolders(when string, holders map[string]float64, objects int) {
	kv := make([]any, 0, 2*len(holders))
	for _, h := range append(slices.Clone(Holders), treeCopies) {
		if b, ok := holders[h]; ok {
			kv = append(kv, h, int(b/float64(objects)))
		}
	}
	klog.InfoS("Heap holders in bytes per object "+when, kv...)
}

// HolderMetric is the metric of holder h's bytes per object after the
// updates.
func HolderMetric(h string) string { return "heap_after_updates_" + h + "_bytes_per_object" }

// writeHeapProfile writes the heap profile as of the last collection.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		_ = f.Close()
		return fmt.Errorf("heap profile: %w", err)
	}
	return f.Close()
}
