package integration

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"

	"github.com/watchkeeper/watchkeeper/cacher"
	"github.com/watchkeeper/watchkeeper/internal/etcdtest"
)

const (
	// floodRevisions is the backlog the flooded resource's etcd watch
	// starts behind. etcd hands an unsynced watcher at most 1,000 revisions
	// per sync round and waits 100ms between rounds while the same watcher
	// stays unsynced (server/v3 storage/mvcc watchable_store.go), so the
	// watch lags for at least 6s on any machine: two of floodSilence.
	// (30,000 revisions caught up in 5.4-5.6s on a faster machine of 2026-12-04,
	// under the 2.5 timeouts the test asks of a run, and it failed when run
	// alone.)
	floodRevisions = 60_000
	floodObjects   = 500
	floodWriters   = 32
	// floodSilence is the idle cache's storage silence timeout. A check
	// that finds etcd ahead waits as long again for an answer, so an idle
	// cache whose progress requests went unanswered would relist within
	// two of it: well inside the flooded watch's lag.
	//
	// Separate streams do not make the answer instant: each round of etcd's
	// syncWatchers holds the watch store's lock while it reads the whole
	// remaining backlog (server/v3 storage/mvcc watchable_store.go,
	// rangeEvents), and progressIfSync waits for that lock. A machine loaded
	// past make test (go test -count=2 ./integration beside a CPU burner)
	// twice left one idle progress request unanswered for 2s right after the
	// flood's watch opened, and with 50,000 revisions and 2s once for 4s;
	// the re-opened watch was answered at once while the flood lagged on.
	// Two shared streams stay unanswered for the whole lag (with 50,000
	// revisions, 4 silent calls, 1,185 of 3,034 samples not ready).
	//
	// 1s failed plain make test on 2026-12-03's slower machine (one idle
	// progress request unanswered past 1s during the catch-up), so 3s: with
	// the shared-stream bug planted (every cache's watch metadata the same)
	// and 3s the test still fails (the flood caught up in 13s, the idle
	// watch was called silent twice, 591 of 3,179 samples not ready), and
	// without it it passes. A flood that catches up in less than two
	// timeouts (6s) could no longer show the bug; here it takes 13-22s.
	floodSilence = 3 * time.Second
)

// gatedWatchStorage holds the cache's storage watches until the test
// opens the gate: the cache lists, the test writes a backlog, and the
// watch then starts behind it, as a resource's watch does after a write
// burst during its list. Every watch waits, not only the first: the
// after-list backfill opens one of its own beside the reflector's, and when
// it was the first (once in CI, under -race) the reflector's watch ran live
// through the flood and the run proved nothing.
type gatedWatchStorage struct {
	storage.Interface
	asked chan struct{} // closed when the first watch is asked for
	gate  chan struct{}
	once  sync.Once
}

func (s *gatedWatchStorage) Watch(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	s.once.Do(func() { close(s.asked) })
	select {
	case <-s.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Interface.Watch(ctx, key, opts)
}

// A resource whose etcd watch lags cannot starve a quiet one of progress
// notifications (issue 11, point 2). etcd answers a progress request only
// when every watcher on that gRPC stream is synced, so caches that shared
// one stream over one etcd client would see the quiet one's check go
// unanswered while etcd's revision moves on, and relist it. Two caches
// share one client here; one is flooded and its watch starts floodRevisions
// revisions behind, the other stays idle through several silence timeouts
// and must not relist, have its watch called silent, go not ready, refuse
// a read or end a watcher.
func TestFloodedResourceDoesNotStarveIdleOnes(t *testing.T) {
	t.Parallel()
	client := etcdtest.Start(t).KubernetesClient()
	// Room for the flood on a loaded machine: beside the other parallel
	// tests and a build, writing it took 80s and catching up 20s, and the
	// test once ran out of a 3-minute budget at its last write.
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	newCache := func(raw storage.Interface, resource string, silence time.Duration) *cacher.Cacher {
		cfg := podCacheConfigFor(raw, resource)
		cfg.StorageSilenceTimeout = silence
		cfg.BookmarkGranularity = 50 * time.Millisecond // the check runs on each tick
		c, err := cacher.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Stop)
		return c
	}

	idle := newCache(newPodStore(t, client, protoCodec, transformer, "idlepods"), "idlepods", floodSilence)
	if err := idle.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	idleGR := map[string]string{"group": "", "resource": "idlepods"}
	initsBefore, _ := metricValue(t, "apiserver_watch_cache_initializations_total", idleGR)
	retriesBefore, _ := metricValue(t, "watchkeeper_watch_cache_storage_watch_retries_total", idleGR)
	seed := &example.Pod{}
	if err := idle.Create(ctx, "/idlepods/ns/seed", &example.Pod{ObjectMeta: metav1.ObjectMeta{Name: "seed", Namespace: "ns"}}, seed, 0); err != nil {
		t.Fatal(err)
	}

	gated := &gatedWatchStorage{Interface: newPodStore(t, client, protoCodec, transformer, "floodpods"),
		asked: make(chan struct{}), gate: make(chan struct{})}
	// No silence check for the flooded cache: the test holds its watch at
	// the gate on purpose, and the check would end it.
	flooded := newCache(gated, "floodpods", 0)
	select {
	case <-gated.asked:
	case <-ctx.Done():
		t.Fatal("the flooded cache never opened its watch")
	}

	// The idle resource's clients: watches from the seed, and reads.
	type idleWatcher struct {
		w      watch.Interface
		events chan watch.Event
	}
	var watchers []*idleWatcher
	for i := 0; i < 5; i++ {
		w, err := idle.Watch(ctx, "/idlepods/", storage.ListOptions{ResourceVersion: seed.ResourceVersion,
			Predicate: storage.Everything, Recursive: true})
		if err != nil {
			t.Fatal(err)
		}
		iw := &idleWatcher{w: w, events: make(chan watch.Event, 10)}
		watchers = append(watchers, iw)
		go func() {
			for ev := range w.ResultChan() {
				iw.events <- ev
			}
			close(iw.events)
		}()
	}
	defer func() {
		for _, iw := range watchers {
			iw.w.Stop()
		}
	}()

	watchCtx, stopWatching := context.WithCancel(ctx)
	var samples, notReady, refused atomic.Int64
	var refusals sync.Map
	var watching sync.WaitGroup
	watching.Add(1)
	go func() {
		defer watching.Done()
		for watchCtx.Err() == nil {
			samples.Add(1)
			if !idle.Ready() {
				notReady.Add(1)
			}
			list := &example.PodList{}
			if err := idle.GetList(watchCtx, "/idlepods/", storage.ListOptions{ResourceVersion: "0",
				Predicate: storage.Everything, Recursive: true}, list); err != nil && watchCtx.Err() == nil {
				refused.Add(1)
				refusals.Store(err.Error(), true)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()

	// The flood: floodRevisions writes to the flooded resource while its
	// watch waits at the RV of its list.
	pods := make([][]byte, floodObjects)
	for i := range pods {
		data, err := runtime.Encode(protoCodec, &example.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i), Namespace: "ns"}})
		if err != nil {
			t.Fatal(err)
		}
		pods[i] = data
	}
	start := time.Now()
	var next atomic.Int64
	var lastRev atomic.Int64
	var writers sync.WaitGroup
	errs := make(chan error, floodWriters)
	for range floodWriters {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for {
				i := next.Add(1) - 1
				if i >= floodRevisions {
					return
				}
				o := i % floodObjects
				resp, err := client.Client.Put(ctx, fmt.Sprintf("/registry/floodpods/ns/p%d", o), string(pods[o]))
				if err != nil {
					errs <- err
					return
				}
				for cur := lastRev.Load(); resp.Header.Revision > cur && !lastRev.CompareAndSwap(cur, resp.Header.Revision); cur = lastRev.Load() {
				}
			}
		}()
	}
	writers.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("flooding: %v", err)
	}
	t.Logf("wrote %d revisions in %v", floodRevisions, time.Since(start).Round(time.Millisecond))

	// The flooded cache's watch now starts floodRevisions behind, on its
	// own stream; the idle one's must go on being answered.
	released := time.Now()
	close(gated.gate)
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		return flooded.Inspect(ctx).CacheRV >= uint64(lastRev.Load()), nil
	}); err != nil {
		t.Fatalf("the flooded cache never caught up to %d: %v", lastRev.Load(), err)
	}
	lag := time.Since(released)
	t.Logf("the flooded cache caught up in %v", lag.Round(time.Millisecond))
	if lag < 5*floodSilence/2 {
		t.Fatalf("the flooded watch lagged only %v, under 2.5 silence timeouts of %v: this run proves nothing", lag, floodSilence)
	}
	stopWatching()
	watching.Wait()

	inits, _ := metricValue(t, "apiserver_watch_cache_initializations_total", idleGR)
	retries, _ := metricValue(t, "watchkeeper_watch_cache_storage_watch_retries_total", idleGR)
	t.Logf("idle cache over %v: %d samples, %d not ready, %d reads refused, %v relists, %v watches re-opened",
		time.Since(start).Round(time.Millisecond), samples.Load(), notReady.Load(), refused.Load(), inits-initsBefore, retries-retriesBefore)
	if inits != initsBefore {
		t.Errorf("the idle cache relisted %v times, want 0", inits-initsBefore)
	}
	if retries != retriesBefore {
		t.Errorf("the idle cache's storage watch was called silent and re-opened %v times, want 0", retries-retriesBefore)
	}
	if notReady.Load() != 0 {
		t.Errorf("the idle cache was not ready in %d of %d samples, want 0", notReady.Load(), samples.Load())
	}
	if refused.Load() != 0 {
		refusals.Range(func(k, _ any) bool { t.Errorf("a read of the idle resource was refused: %v", k); return true })
	}

	// Every idle watcher is still open and hears the next write.
	if err := idle.Create(ctx, "/idlepods/ns/after", &example.Pod{ObjectMeta: metav1.ObjectMeta{Name: "after", Namespace: "ns"}}, &example.Pod{}, 0); err != nil {
		t.Fatal(err)
	}
	for i, iw := range watchers {
		select {
		case ev, ok := <-iw.events:
			if !ok {
				t.Errorf("idle watcher %d: ended by the cache, want it open", i)
				continue
			}
			if pod, isPod := plainEvent(ev).Object.(*example.Pod); ev.Type != watch.Added || !isPod || pod.Name != "after" {
				t.Errorf("idle watcher %d: got %v %T, want ADDED of the new pod", i, ev.Type, ev.Object)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("idle watcher %d: nothing in 30s after a write", i)
		}
	}
}
