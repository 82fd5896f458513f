package storagebench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
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
// events. The writes come from a writer process (WriterCommand), so that
// CPU is the cache's and its clients', not the writes'.
//
// Between those rounds come as many of the same writes to exactKeyUnwatched
// more objects, which no watcher watches: their CPU per write is what the
// watchers cost an event none of them selects (flat, if the cache's index
// works), and the difference between the two, per delivery, is what each
// event a watcher does get costs.
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
	// The exactKeyUnwatched objects after it are no watcher's.
	all := objects + 1 + exactKeyUnwatched
	if err := writePods(ctx, raw, all, setupWriters, func(i int) *example.Pod {
		return benchPod(exactKeyName(i), time.Time{})
	}); err != nil {
		return nil, fmt.Errorf("creating %d objects: %w", all, err)
	}
	setup := time.Since(setupStart)
	writer, err := startWriter(env)
	if err != nil {
		return nil, err
	}
	defer writer.stop()
	s, destroy, err := openStorage(ctx, env, decorator)
	if err != nil {
		return nil, err
	}
	defer destroy()
	if err := waitForObjects(ctx, s, all); err != nil {
		return nil, err
	}
	rv, _, err := currentRV(ctx, s)
	if err != nil {
		return nil, err
	}

	// What each object's watchers are owed of one round's writes.
	owed := make([]int64, objects)
	for _, t := range exactKeyTargets(objects, writes) {
		owed[t]++
	}
	var perRound int64
	for i := range watchers {
		perRound += owed[i%objects]
	}

	var (
		latencies histogram.Histogram
		got       = make([]atomic.Int64, watchers)
		wrong     atomic.Int64 // events of another object, or not MODIFIED
		delivered atomic.Int64
		sentinels atomic.Int64
		slot      int
	)
	newHandler := func() eventHandler {
		i := slot
		slot++
		if i == watchers { // the sentinel's watcher
			return func(watch.Event) { sentinels.Add(1) }
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
			delivered.Add(1)
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

	// The window profile spans every round, unwatched ones included, and
	// so also the collections forced before each, which no round's CPU
	// counts.
	var (
		rounds, unwatchedRounds []exactKeyRound
		wall, writeTime         time.Duration
		gcs                     uint64
		complete                = true
		stopProfile             = profileWindow(env.WindowProfile)
		watched                 = exactKeyBatch{first: 0, count: objects, writes: writes, sentinel: objects}
		unwatched               = exactKeyBatch{first: objects + 1, count: exactKeyUnwatched, writes: writes, sentinel: objects}
	)
	for r := int64(1); r <= exactKeyRounds && complete; r++ {
		round, err := exactKeyRoundOf(writer, watched, func() bool {
			return waitFor(ctx, &delivered, stallTimeout, func() bool {
				return delivered.Load() >= r*perRound && sentinels.Load() >= 2*r-1
			})
		})
		if err != nil {
			stopProfile()
			return nil, err
		}
		rounds = append(rounds, round)
		wall += round.wall
		writeTime += round.writes
		gcs += round.gcCycles
		if complete = round.complete; !complete {
			break
		}
		round, err = exactKeyRoundOf(writer, unwatched, func() bool {
			return waitFor(ctx, &sentinels, stallTimeout, func() bool { return sentinels.Load() >= 2*r })
		})
		if err != nil {
			stopProfile()
			return nil, err
		}
		unwatchedRounds = append(unwatchedRounds, round)
		complete = round.complete
	}
	stopProfile()
	if !complete {
		klog.InfoS("Exact-key delivery did not complete", "round", len(rounds), "unwatchedRounds", len(unwatchedRounds), "delivered", delivered.Load(), "expected", int64(len(rounds))*perRound)
	}
	f.report()

	var missing, extra int64
	for i := range watchers {
		d := got[i].Load() - int64(len(rounds))*owed[i%objects]
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
	cpus := perWrite(rounds, writes, exactKeyRound.cpuMs)
	rec.Add("cpu_ms_per_write", result.Median(cpus), "ms", result.Lower)
	rec.Add("cpu_ms_per_write_max", slices.Max(cpus), "ms", result.Lower)
	// The first round also pays what each watcher costs once, on its first
	// event (upstream's per-watcher goroutines grow their stacks then).
	rec.Add("cpu_ms_per_write_first", cpus[0], "ms", result.Lower)
	if len(unwatchedRounds) > 0 {
		unwatchedCPU := result.Median(perWrite(unwatchedRounds, writes, exactKeyRound.cpuMs))
		rec.Add("cpu_ms_per_write_unwatched", unwatchedCPU, "ms", result.Lower)
		// Below a delivery a write the difference of two medians, each
		// as noisy as the other, is mostly noise once divided by the
		// deliveries (at 1k watchers, 0.1 a write: -15 to +108 us).
		if deliveries := float64(perRound) / float64(writes); deliveries >= 1 {
			perDelivery := (result.Median(cpus) - unwatchedCPU) * 1000 / deliveries
			rec.Add("cpu_us_per_delivery", perDelivery, "us", result.Lower)
		}
	}
	// Allocations per applied event are a cost the CPU per write hides in
	// part (the collections they bring fall in some rounds, not others):
	// heap objects allocated in the round, the clients' included, per write.
	rec.Add("allocs_per_write", result.Median(perWrite(rounds, writes, exactKeyRound.allocCount)), "allocs", result.Lower)
	if len(unwatchedRounds) > 0 {
		rec.Add("allocs_per_write_unwatched", result.Median(perWrite(unwatchedRounds, writes, exactKeyRound.allocCount)), "allocs", result.Lower)
	}
	// A GC cycle is a large share of a round's CPU at 100k watchers (their
	// clients' stacks are scanned), so whether one fell in a round
	// explains much of the spread between rounds.
	rec.Add("gc_cycles_in_window", float64(gcs), "cycles", "")
	rec.Add("rounds", float64(len(rounds)), "rounds", "")
	rec.Add("unwatched_rounds", float64(len(unwatchedRounds)), "rounds", "")
	rec.Add("events_expected", float64(int64(len(rounds))*perRound), "events", "")
	rec.Add("events_missing", float64(missing), "events", result.Lower)
	rec.Add("events_extra", float64(extra), "events", result.Lower)
	rec.Add("latency_p50_ms", ms(latencies.Quantile(0.50)), "ms", result.Lower)
	rec.Add("latency_p99_ms", ms(latencies.Quantile(0.99)), "ms", result.Lower)
	rec.Add("watchers_closed", float64(f.closed.Load()), "watchers", result.Lower)
	// Bookmarks are deliveries too: a cache that sends them early in a
	// watch's life spends CPU on them in the rounds.
	rec.Add("bookmarks_received", float64(f.bookmarks.Load()), "bookmarks", "")
	rec.Add("window_seconds", wall.Seconds(), "s", "")
	rec.Add("write_seconds", writeTime.Seconds(), "s", result.Lower)
	rec.Add("open_seconds", openTime.Seconds(), "s", result.Lower)
	rec.Add("setup_seconds", setup.Seconds(), "s", "")
	return rec.Results(), nil
}

// exactKeyRounds is how many times the writes are made and measured over
// the same watchers. One round's CPU is 0.1-0.3s of two shared cores, which
// one stray wakeup or GC cycle moves by half; the median of five does not
// move with one, and its latencies are five times as many samples.
const exactKeyRounds = 5

// exactKeyUnwatched is how many objects the unwatched rounds write to.
const exactKeyUnwatched = 1000

// perWrite is each round's figure (of: its CPU in ms, its allocations)
// over the writes.
func perWrite(rounds []exactKeyRound, writes int, of func(exactKeyRound) float64) []float64 {
	xs := make([]float64, len(rounds))
	for i, r := range rounds {
		xs[i] = of(r) / float64(writes)
	}
	return xs
}

// exactKeyRound is what one round of writes cost the measured process.
type exactKeyRound struct {
	// cpu is the process's CPU seconds from the first write until every
	// watcher had the round's events.
	cpu float64
	// allocs is how many heap objects the process allocated over the
	// same span.
	allocs   uint64
	wall     time.Duration
	writes   time.Duration
	gcCycles uint64
	complete bool
}

func (r exactKeyRound) cpuMs() float64      { return r.cpu * 1000 }
func (r exactKeyRound) allocCount() float64 { return float64(r.allocs) }

// exactKeyRoundOf collects garbage, then has the writer make batch b and
// waits (delivered) until every watcher has its writes.
func exactKeyRoundOf(writer *writerProcess, b exactKeyBatch, delivered func() bool) (exactKeyRound, error) {
	runtime.GC()
	allocStart := heapAllocs()
	start, cpuStart, gcStart := time.Now(), cpuSeconds(), gcCycles()
	writeTime, err := writer.exactKey(b)
	if err != nil {
		return exactKeyRound{}, err
	}
	complete := delivered()
	round := exactKeyRound{
		cpu: cpuSeconds() - cpuStart, wall: time.Since(start), writes: writeTime,
		gcCycles: gcCycles() - gcStart, complete: complete,
	}
	// Read after the CPU: its stop of the world is no round's cost.
	round.allocs = heapAllocs() - allocStart
	return round, nil
}

func exactKeyName(i int) string { return fmt.Sprintf("obj-%d", i) }

// exactKeyTargets is which object each of the writes updates: the same for
// both caches, and for the writer process and the scenario that counts what
// each watcher is owed.
func exactKeyTargets(objects, writes int) []int {
	rng := rand.New(rand.NewPCG(exactKeySeed, uint64(objects)))
	targets := make([]int, writes)
	for k := range targets {
		targets[k] = rng.IntN(objects)
	}
	return targets
}

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
