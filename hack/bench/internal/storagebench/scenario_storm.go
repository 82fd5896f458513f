package storagebench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/klog/v2"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
	"github.com/watchkeeper/watchkeeper/internal/fixtures"
	"github.com/watchkeeper/watchkeeper/internal/histogram"
)

const (
	// stormWriters carry the paced writes; enough that one slow etcd
	// round trip does not hold the rate back.
	stormWriters = 8
	// stormSteady is how long the writes run before the storm: the lag
	// outside a storm, and the caches settled after their initial list.
	stormSteady = 3 * time.Second
	// stormTail and stormMinWindow close the storm window: it ends stormTail
	// after the last WatchList got its initial-events-end bookmark (or
	// failed), and lasts at least stormMinWindow, so the window also holds
	// the reflector's catch-up and enough writes for a p99.
	stormTail      = 2 * time.Second
	stormMinWindow = 5 * time.Second
	// stormCatchUp bounds the wait, after the writes stop, for the lag
	// watch to get the last write: a cache stalled by the storm may be far
	// behind.
	stormCatchUp = 30 * time.Second
	// stormWatchListTimeout bounds one WatchList of the storm.
	stormWatchListTimeout = 90 * time.Second
)

// Storm is an informer start storm (issue 13.2): objects pods spread over
// nodes nodes (spec.nodeName=node-<i%nodes>), writers updating random pods
// at rate writes/s throughout, and after stormSteady one kubelet-like
// WatchList per node, all started at once: sendInitialEvents=true,
// resourceVersionMatch=NotOlderThan, bookmarks allowed, a cluster-wide key
// and the field selector spec.nodeName=node-<n>, as the generic registry
// passes a kubelet's pods WatchList to storage.
//
// It reports (a) the reflector lag: for each write, from the time the
// write's schedule had it due (writes are paced open-loop, so a starved
// process cannot move that time; it adds etcd's round trip, under a
// millisecond, to both caches alike) to the moment an always-open plain
// watch of the whole resource (opened on the cache before the writes start,
// read by its own goroutine, resumed from its last resourceVersion if the
// cache closes it) received that write's event. It is the same watch in
// both caches, so it measures the cache's intake and dispatch of one event;
// the p99 is over the writes due in the storm window. lag_from_answer is
// the same from the moment the writer had etcd's answer, which a process
// starved by its cache sees late, hiding lag. (b) the WatchLists'
// time from the Watch call to the initial-events-end bookmark.
func Storm(ctx context.Context, env Env, decorator string, objects, nodes, rate int) ([]result.Result, error) {
	rec := result.NewRecorder("storm", Level, decorator, map[string]int{
		"objects": objects, "nodes": nodes, "watchlists": nodes, "writes_per_second": rate})
	raw, rawDestroy, err := openRawStorage(env)
	if err != nil {
		return nil, err
	}
	defer rawDestroy()
	setupStart := time.Now()
	if err := writePods(ctx, raw, objects, setupWriters, func(i int) *example.Pod {
		return stormPod(i, nodes)
	}); err != nil {
		return nil, fmt.Errorf("creating %d pods: %w", objects, err)
	}
	setup := time.Since(setupStart)
	readyStart := time.Now()
	s, destroy, err := openStorage(ctx, env, decorator)
	if err != nil {
		return nil, err
	}
	defer destroy()
	if err := waitForObjects(ctx, s, objects); err != nil {
		return nil, err
	}
	ready := time.Since(readyStart)
	if err := waitWatchProgressSupported(ctx); err != nil {
		return nil, err
	}
	rv, _, err := currentRV(ctx, s)
	if err != nil {
		return nil, err
	}

	lag := startLagWatch(ctx, s, rv)
	defer lag.stop()
	receipts := &lag.receipts

	pw, err := newPodWriter(env)
	if err != nil {
		return nil, err
	}
	defer pw.close()
	w := startPacedWriters(ctx, pw, objects, nodes, rate)
	defer w.stop()
	time.Sleep(stormSteady)

	// The storm.
	perNode := make([]int, nodes)
	for i := range objects {
		perNode[i%nodes]++
	}
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		took      = make([]time.Duration, nodes)
		failed    atomic.Int64
		firstErr  atomic.Pointer[string]
		finished  atomic.Int64
		allDone   = make(chan struct{})
		begin     = make(chan struct{})
		stopLists = make(chan struct{})
	)
	for n := range nodes {
		wg.Go(func() {
			<-begin
			// The storm is over for this WatchList at its bookmark, or when
			// it fails; it is read on until stopLists either way. One that
			// got its bookmark and failed later keeps its time and counts as
			// failed.
			var once sync.Once
			done := func() {
				once.Do(func() {
					if finished.Add(1) == int64(nodes) {
						close(allDone)
					}
				})
			}
			err := stormWatchList(ctx, s, n, perNode[n], stopLists, func(d time.Duration) {
				mu.Lock()
				took[n] = d
				mu.Unlock()
				done()
			})
			if err != nil {
				failed.Add(1)
				msg := err.Error()
				firstErr.CompareAndSwap(nil, &msg)
			}
			done()
		})
	}
	stormStart := time.Now()
	close(begin)
	select {
	case <-allDone:
	case <-ctx.Done():
		close(stopLists)
		wg.Wait()
		return nil, ctx.Err()
	}
	stormEnd := time.Now()
	windowEnd := stormEnd.Add(stormTail)
	if earliest := stormStart.Add(stormMinWindow); windowEnd.Before(earliest) {
		windowEnd = earliest
	}
	time.Sleep(time.Until(windowEnd))
	writes := w.stop()
	// Let the lag watch catch up with the last writes before reading it.
	if len(writes) == 0 {
		close(stopLists)
		wg.Wait()
		return nil, fmt.Errorf("no write succeeded (%d errors)", w.errors.Load())
	}
	var last uint64
	for _, wr := range writes {
		last = max(last, wr.rv)
	}
	waitFor(ctx, nil, stormCatchUp, func() bool { _, ok := receipts.Load(last); return ok })
	close(stopLists)
	wg.Wait()
	lag.stop()
	if p := firstErr.Load(); p != nil {
		klog.InfoS("WatchLists failed", "count", failed.Load(), "first", *p)
	}

	// storm is the window's lags; during the lags of the writes answered
	// before the last WatchList had its bookmark, the storm proper.
	var steady, storm, during, fromAnswer histogram.Histogram
	var stormWrites, missing int
	for _, wr := range writes {
		v, ok := receipts.Load(wr.rv)
		inStorm := !wr.due.Before(stormStart) && wr.due.Before(windowEnd)
		if inStorm {
			stormWrites++
		}
		if !ok {
			missing++
			continue
		}
		d := v.(time.Time).Sub(wr.due)
		switch {
		case inStorm:
			storm.Record(d)
			fromAnswer.Record(v.(time.Time).Sub(wr.at))
			if wr.due.Before(stormEnd) {
				during.Record(d)
			}
		case wr.due.Before(stormStart) && wr.due.After(stormStart.Add(-stormSteady+time.Second)):
			steady.Record(d)
		}
	}
	var ok []time.Duration
	mu.Lock()
	defer mu.Unlock()
	for n := range nodes {
		if took[n] > 0 {
			ok = append(ok, took[n])
		}
	}
	// No sample, no figure: a 0 would read as a perfect result.
	if storm.Count() > 0 {
		rec.Add("lag_p50_ms", ms(storm.Quantile(0.50)), "ms", result.Lower)
		rec.Add("lag_p99_ms", ms(storm.Quantile(0.99)), "ms", result.Lower)
		rec.Add("lag_max_ms", ms(storm.Max()), "ms", result.Lower)
		rec.Add("lag_from_answer_p99_ms", ms(fromAnswer.Quantile(0.99)), "ms", result.Lower)
	}
	if during.Count() > 0 {
		rec.Add("lag_p99_until_last_bookmark_ms", ms(during.Quantile(0.99)), "ms", result.Lower)
	}
	rec.Add("lag_samples_until_last_bookmark", float64(during.Count()), "writes", "")
	if steady.Count() > 0 {
		rec.Add("lag_p99_before_storm_ms", ms(steady.Quantile(0.99)), "ms", result.Lower)
	}
	if len(ok) > 0 {
		rec.Add("initial_events_end_p50_ms", ms(histogram.SampleQuantile(ok, 0.50)), "ms", result.Lower)
		rec.Add("initial_events_end_p99_ms", ms(histogram.SampleQuantile(ok, 0.99)), "ms", result.Lower)
		rec.Add("initial_events_end_max_ms", ms(histogram.SampleQuantile(ok, 1)), "ms", result.Lower)
	}
	rec.Add("lag_samples", float64(storm.Count()), "writes", "")
	rec.Add("watchlists_failed", float64(failed.Load()), "watchlists", result.Lower)
	rec.Add("writes_missing_from_lag_watch", float64(missing), "writes", result.Lower)
	rec.Add("lag_watch_closed", float64(lag.closed.Load()), "times", result.Lower)
	rec.Add("storm_writes_per_second", float64(stormWrites)/windowEnd.Sub(stormStart).Seconds(), "writes/s", result.Higher)
	rec.Add("storm_seconds", stormEnd.Sub(stormStart).Seconds(), "s", result.Lower)
	rec.Add("window_seconds", windowEnd.Sub(stormStart).Seconds(), "s", "")
	rec.Add("write_errors", float64(w.errors.Load()), "writes", result.Lower)
	rec.Add("cache_ready_seconds", ready.Seconds(), "s", result.Lower)
	rec.Add("setup_seconds", setup.Seconds(), "s", "")
	return rec.Results(), nil
}

func stormPod(i, nodes int) *example.Pod {
	pod := benchPod(stormPodName(i), time.Time{})
	pod.Spec.NodeName = "node-" + strconv.Itoa(i%nodes)
	return pod
}

func stormPodName(i int) string { return "storm-" + strconv.Itoa(i) }

// stormWatchList is one kubelet's pods WatchList for node n: it calls
// bookmarked with the time from the Watch call to the initial-events-end
// bookmark, checks that the initial events were exactly the node's pods,
// and then keeps reading, as the kubelet's informer does, until stop.
func stormWatchList(ctx context.Context, s storage.Interface, n, want int, stop <-chan struct{}, bookmarked func(time.Duration)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	node := "node-" + strconv.Itoa(n)
	yes := true
	start := time.Now()
	w, err := s.Watch(ctx, resourcePrefix, storage.ListOptions{
		ResourceVersion:      "",
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		SendInitialEvents:    &yes,
		Recursive:            true,
		Predicate: storage.SelectionPredicate{
			Label:               labels.Everything(),
			Field:               fields.OneTermEqualSelector("spec.nodeName", node),
			GetAttrs:            fixtures.PodAttrs,
			IndexFields:         []string{"spec.nodeName"},
			AllowWatchBookmarks: true,
		},
	})
	if err != nil {
		return fmt.Errorf("watchlist %s: %w", node, err)
	}
	defer w.Stop()
	timeout := time.NewTimer(stormWatchListTimeout)
	defer timeout.Stop()
	added := map[string]bool{}
	for {
		select {
		case <-stop:
			return fmt.Errorf("watchlist %s: stopped before its bookmark (%d initial events)", node, len(added))
		case <-timeout.C:
			return fmt.Errorf("watchlist %s: no initial-events-end bookmark within %v (%d initial events)", node, stormWatchListTimeout, len(added))
		case ev, ok := <-w.ResultChan():
			if !ok {
				return fmt.Errorf("watchlist %s: closed before its bookmark (%d initial events)", node, len(added))
			}
			switch ev.Type {
			case watch.Error:
				return fmt.Errorf("watchlist %s: %w", node, apierrors.FromObject(ev.Object))
			case watch.Added:
				m, err := meta.Accessor(ev.Object)
				if err != nil {
					return err
				}
				added[m.GetName()] = true
			case watch.Bookmark:
				m, err := meta.Accessor(ev.Object)
				if err != nil || m.GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" {
					continue
				}
				bookmarked(time.Since(start))
				if len(added) != want {
					return fmt.Errorf("watchlist %s: initial-events-end after %d distinct pods, want %d", node, len(added), want)
				}
				// From here on the watch is only read, as an informer's is.
				return drain(w, stop)
			}
		}
	}
}

// drain reads w until stop, and fails if w ends first.
func drain(w watch.Interface, stop <-chan struct{}) error {
	for {
		select {
		case <-stop:
			return nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return fmt.Errorf("watch closed after its initial events")
			}
			if ev.Type == watch.Error {
				return fmt.Errorf("watch error after its initial events: %w", apierrors.FromObject(ev.Object))
			}
		}
	}
}

// pacedWrite is one write: the resourceVersion etcd gave it, when the
// schedule had it due, and when the writer had etcd's answer.
type pacedWrite struct {
	rv  uint64
	due time.Time
	at  time.Time
}

// pacedToken is one scheduled write: which pod, and when it was due.
type pacedToken struct {
	pod int
	due time.Time
}

// pacedWriters update random pods of a resource at a fixed rate from a few
// goroutines, recording every write; a write the writers are too slow to
// start on time is started late, not skipped.
type pacedWriters struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	writes []pacedWrite
	errors atomic.Int64
	once   sync.Once
}

func startPacedWriters(ctx context.Context, pw *podWriter, objects, nodes, rate int) *pacedWriters {
	ctx, cancel := context.WithCancel(ctx)
	p := &pacedWriters{cancel: cancel}
	tokens := make(chan pacedToken, 1<<16)
	p.wg.Go(func() {
		defer close(tokens)
		start := time.Now()
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		issued := 0
		rng := rand.New(rand.NewPCG(exactKeySeed, uint64(objects)))
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			for due := int(time.Since(start).Seconds() * float64(rate)); issued < due; issued++ {
				at := start.Add(time.Duration(issued) * time.Second / time.Duration(rate))
				tokens <- pacedToken{rng.IntN(objects), at}
			}
		}
	})
	for range stormWriters {
		p.wg.Go(func() {
			for tok := range tokens {
				rv, err := pw.put(ctx, stormPod(tok.pod, nodes))
				at := time.Now()
				if err != nil {
					if ctx.Err() == nil {
						p.errors.Add(1)
					}
					continue
				}
				p.mu.Lock()
				p.writes = append(p.writes, pacedWrite{rv, tok.due, at})
				p.mu.Unlock()
			}
		})
	}
	return p
}

// stop ends the writes and returns them, in the order they were answered.
func (p *pacedWriters) stop() []pacedWrite {
	p.once.Do(func() {
		p.cancel()
		p.wg.Wait()
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.writes
}

// lagWatch is the storm's always-open plain watch of the whole resource: it
// records when each resourceVersion's event arrived. Should the cache close
// it, it resumes from the last resourceVersion it saw, as a reflector
// would, so the events in between arrive late rather than never, and
// counts the close.
type lagWatch struct {
	receipts sync.Map // uint64 -> time.Time
	closed   atomic.Int64
	cancel   context.CancelFunc
	done     chan struct{}
	once     sync.Once
}

func startLagWatch(ctx context.Context, s storage.Interface, rv string) *lagWatch {
	ctx, cancel := context.WithCancel(ctx)
	l := &lagWatch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		pred := storage.Everything
		pred.AllowWatchBookmarks = true
		for ctx.Err() == nil {
			w, err := s.Watch(ctx, resourcePrefix, storage.ListOptions{ResourceVersion: rv, Recursive: true, Predicate: pred})
			if err != nil {
				klog.InfoS("Lag watch could not resume", "resourceVersion", rv, "err", err)
				time.Sleep(100 * time.Millisecond)
				continue
			}
			rv = l.read(w, rv)
			w.Stop()
			if ctx.Err() == nil {
				l.closed.Add(1)
				klog.InfoS("The cache closed the lag watch; resuming", "resourceVersion", rv)
			}
		}
	}()
	return l
}

// read records w's events until w ends and returns the last
// resourceVersion seen.
func (l *lagWatch) read(w watch.Interface, rv string) string {
	for ev := range w.ResultChan() {
		now := time.Now()
		if ev.Type == watch.Error {
			klog.InfoS("Lag watch error", "err", apierrors.FromObject(ev.Object))
			return rv
		}
		m, err := meta.Accessor(ev.Object)
		if err != nil {
			continue
		}
		rv = m.GetResourceVersion()
		if ev.Type == watch.Bookmark {
			continue
		}
		if v, err := strconv.ParseUint(rv, 10, 64); err == nil {
			l.receipts.Store(v, now)
		}
	}
	return rv
}

func (l *lagWatch) stop() {
	l.once.Do(func() {
		l.cancel()
		<-l.done
	})
}
