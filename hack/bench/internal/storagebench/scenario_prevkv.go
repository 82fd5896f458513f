package storagebench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
	"github.com/watchkeeper/watchkeeper/internal/fixtures"
)

// ParamWithoutPrevKV is the prevkv scenario's param that carries the gate
// WatchFromStorageWithoutPrevKV of the run: 1 on, 0 off. The gate is
// process-wide, so each value is a run (and a row) of its own.
const ParamWithoutPrevKV = "gate_without_prevkv"

// prevKVPhases are the prevkv scenario's writes, in order: every object
// created, then updated once, then deleted.
var prevKVPhases = []string{"create", "update", "delete"}

// PrevKV is what the cache's own etcd watch costs etcd and the wire, with
// and without previous values (gate WatchFromStorageWithoutPrevKV, read from
// the process's feature gate, which the run sets): with the cache watching an
// empty resource, objects core/v1 pods of 2-4 KB (fixtures.RealisticPod) are
// created, updated once and deleted, straight in etcd from a client of
// their own, a phase at a time, and each phase ends once a watch of the
// cache has its last event.
//
// It counts, per phase and in all: etcd's MVCC ranges (etcdCounters: with
// PrevKV, etcd ranges its store for every update and delete it sends the
// watch), its Range RPCs, the bytes of gRPC messages it sent (its whole
// server's: the writes' answers too), and the bytes the cache's etcd
// clients received, counted on the wire by a proxy that only the cache's
// storage goes through (countingProxy).
func PrevKV(ctx context.Context, env Env, decorator string, objects int) ([]result.Result, error) {
	if objects <= 0 {
		return nil, fmt.Errorf("prevkv: %d objects", objects)
	}
	without := utilfeature.DefaultFeatureGate.Enabled(features.WatchFromStorageWithoutPrevKV)
	gate := 0
	if without {
		gate = 1
	}
	target, err := hostOf(env.EtcdEndpoint)
	if err != nil {
		return nil, err
	}
	proxy, err := startCountingProxy(target)
	if err != nil {
		return nil, err
	}
	defer proxy.close()
	pw, err := newPodWriter(env)
	if err != nil {
		return nil, err
	}
	defer pw.close()
	cacheEnv := env
	cacheEnv.EtcdEndpoint = proxy.url()
	s, destroy, err := buildCache(cacheEnv, decorator, corePods)
	if err != nil {
		return nil, err
	}
	defer destroy()
	if err := waitReady(ctx, s, corePods); err != nil {
		return nil, fmt.Errorf("%s cache: %w", decorator, err)
	}
	seen, stopWatch, err := watchCacheRV(ctx, s, corePods)
	if err != nil {
		return nil, err
	}
	defer stopWatch()
	// What the cache does once at its start (watchkeeper's backfill of the
	// history before its list, on a watch of its own) ends before the
	// first sample.
	waitGoroutinesSettle(time.Second, 10*time.Second)

	var (
		phases      []prevKVSample
		objectBytes int
		took        time.Duration
	)
	for _, phase := range prevKVPhases {
		before, err := sampleWire(ctx, env, proxy)
		if err != nil {
			return nil, err
		}
		start := time.Now()
		lastRV, n, err := prevKVWrites(ctx, pw, phase, objects)
		if err != nil {
			return nil, fmt.Errorf("prevkv %s: %w", phase, err)
		}
		if phase == "create" {
			objectBytes = n / objects
		}
		if !waitFor(ctx, seen, stallTimeout, func() bool { return seen.Load() >= int64(lastRV) }) {
			return nil, fmt.Errorf("prevkv %s: the cache's watch is at RV %d, the last write at %d", phase, seen.Load(), lastRV)
		}
		took += time.Since(start)
		after, err := sampleWire(ctx, env, proxy)
		if err != nil {
			return nil, err
		}
		phases = append(phases, after.minus(before))
	}
	var total prevKVSample
	for _, p := range phases {
		total = total.plus(p)
	}
	klog.InfoS("prevkv", "decorator", decorator, "withoutPrevKV", without, "mvccRanges", total.etcd.mvccRanges,
		"rangeRPCs", total.etcd.rangeRPCs, "etcdSentBytes", total.etcd.sentBytes, "cacheReceivedBytes", total.received)

	rec := result.NewRecorder("prevkv", Level, decorator, map[string]int{"objects": objects, ParamWithoutPrevKV: gate})
	events := float64(len(prevKVPhases) * objects)
	rec.Add("etcd_mvcc_ranges", total.etcd.mvccRanges, "ranges", result.Lower)
	rec.Add("etcd_mvcc_ranges_per_event", total.etcd.mvccRanges/events, "ranges", result.Lower)
	rec.Add("etcd_range_rpcs", total.etcd.rangeRPCs, "requests", result.Lower)
	rec.Add("etcd_grpc_sent_bytes", total.etcd.sentBytes, "B", result.Lower)
	rec.Add("cache_received_bytes", float64(total.received), "B", result.Lower)
	rec.Add("cache_received_bytes_per_event", float64(total.received)/events, "B", result.Lower)
	for i, phase := range prevKVPhases {
		rec.Add("etcd_mvcc_ranges_"+phase, phases[i].etcd.mvccRanges, "ranges", result.Lower)
		rec.Add("cache_received_bytes_"+phase, float64(phases[i].received), "B", result.Lower)
	}
	rec.Add("cache_sent_bytes", float64(total.sent), "B", result.Lower)
	rec.Add("object_bytes", float64(objectBytes), "B", "")
	rec.Add("workload_seconds", took.Seconds(), "s", "")
	return rec.Results(), nil
}

// prevKVSample is what etcd and the cache's connections to it counted up to
// one instant, or (minus) over a span.
type prevKVSample struct {
	etcd etcdCounters
	// received and sent are the bytes the cache's etcd clients got from
	// and sent to etcd, on the wire (countingProxy).
	received, sent int64
}

func (s prevKVSample) minus(o prevKVSample) prevKVSample {
	return prevKVSample{etcd: s.etcd.minus(o.etcd), received: s.received - o.received, sent: s.sent - o.sent}
}

func (s prevKVSample) plus(o prevKVSample) prevKVSample {
	return prevKVSample{etcd: s.etcd.plus(o.etcd), received: s.received + o.received, sent: s.sent + o.sent}
}

// sampleWire reads etcd's counters (straight from etcd, not through the
// proxy) and the proxy's.
func sampleWire(ctx context.Context, env Env, proxy *countingProxy) (prevKVSample, error) {
	c, err := scrapeEtcd(ctx, env.EtcdEndpoint)
	if err != nil {
		return prevKVSample{}, err
	}
	return prevKVSample{etcd: c, received: proxy.received(), sent: proxy.sent()}, nil
}

// prevKVObject is object i of the prevkv scenario, at generation (0 as
// created).
func prevKVObject(i, generation int) runtime.Object {
	return fixtures.RealisticPod("pkv-"+strconv.Itoa(i), benchNamespace, i, generation)
}

// prevKVWrites makes one phase's writes, one per object, from fanOutWriters
// concurrent writers: create puts generation 0, update generation 1, delete
// deletes. It returns the highest revision etcd gave a write and the bytes
// of the values put.
func prevKVWrites(ctx context.Context, pw *podWriter, phase string, objects int) (lastRV uint64, bytes int, err error) {
	var (
		next  atomic.Int64
		total atomic.Int64
		mu    sync.Mutex
	)
	err = runWriters(fanOutWriters, func() error {
		for {
			i := int(next.Add(1)) - 1
			if i >= objects {
				return nil
			}
			var rv uint64
			var err error
			switch phase {
			case "create", "update":
				gen := 0
				if phase == "update" {
					gen = 1
				}
				var n int
				rv, n, err = pw.putObject(ctx, fixtures.CorePodCodec, prevKVObject(i, gen))
				total.Add(int64(n))
			case "delete":
				rv, err = pw.deleteObject(ctx, prevKVObject(i, 0))
			default:
				return fmt.Errorf("no phase %q", phase)
			}
			if err != nil {
				return err
			}
			mu.Lock()
			lastRV = max(lastRV, rv)
			mu.Unlock()
		}
	})
	return lastRV, int(total.Load()), err
}

// watchCacheRV opens a watch of every object of s (of res) from its current
// RV and keeps, in seen, the RV of the last event it had (bookmarks
// included): how far the cache has applied etcd's events, learnt without a
// request that could reach etcd.
func watchCacheRV(ctx context.Context, s storage.Interface, res resource) (seen *atomic.Int64, stop func(), err error) {
	list := res.newListFunc()
	if err := s.GetList(ctx, resourcePrefix, storage.ListOptions{Predicate: storage.Everything, Recursive: true}, list); err != nil {
		return nil, nil, fmt.Errorf("consistent list: %w", err)
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return nil, nil, err
	}
	rv := lm.GetResourceVersion()
	pred := storage.Everything
	pred.AllowWatchBookmarks = true
	w, err := s.Watch(ctx, resourcePrefix, storage.ListOptions{ResourceVersion: rv, Recursive: true, Predicate: pred})
	if err != nil {
		return nil, nil, fmt.Errorf("watching the cache: %w", err)
	}
	seen = &atomic.Int64{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				klog.InfoS("The prevkv scenario's watch of the cache got an error", "err", ev.Object)
				continue
			}
			m, err := meta.Accessor(ev.Object)
			if err != nil {
				continue
			}
			if v, err := strconv.ParseInt(m.GetResourceVersion(), 10, 64); err == nil && v > seen.Load() {
				seen.Store(v)
			}
		}
	}()
	return seen, func() { w.Stop(); <-done }, nil
}
