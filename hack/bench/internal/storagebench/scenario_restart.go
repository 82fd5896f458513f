package storagebench

import (
	"context"
	"fmt"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"

	"github.com/watchkeeper/watchkeeper/cacher"
	"github.com/watchkeeper/watchkeeper/decorator"
	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
	"github.com/watchkeeper/watchkeeper/internal/fixtures"
	"github.com/watchkeeper/watchkeeper/internal/histogram"
	"github.com/watchkeeper/watchkeeper/options"
)

// WatchkeeperNoBackfill is watchkeeper without the history backfill after
// each list (cacher.Config.ListBackfillRevisions 0), for the restart
// scenario's question: is that backfill what slows etcd's reads while a
// server's caches start?
const WatchkeeperNoBackfill = "watchkeeper-nobackfill"

// restartAfterReady is how long the GETs go on after every cache is ready:
// what the caches read from etcd after their lists (watchkeeper's history
// backfill) runs then.
const restartAfterReady = 5 * time.Second

// restartResumeFor is how long each round of resumes runs, the GETs with
// them.
const restartResumeFor = 10 * time.Second

// restartNearReach is how far behind etcd the first round of resumes is
// (half the history, if that is less): within
// cacher.DefaultBackfillMaxRevisions, beyond the history a cache reads
// back after its list.
const restartNearReach = 8_000

// restartWriteInterval paces the writes outside every resource that go on
// through the whole run, as a cluster's lease renewals go on through a
// kube-apiserver's restart (300 nodes renew 30 a second). etcd's reads
// wait behind a write that waits for etcd's read lock: a watch from an old
// revision holds it while etcd reads that watch's events (syncWatchers),
// so without writes a backfill's cost to other readers does not show.
const restartWriteInterval = 20 * time.Millisecond

// restartProbers read the probed object at once, as a restart's clients
// (controllers, kubelets, the RBAC authorizer's informers) do.
const restartProbers = 4

// Restart is a server restart's start at the storage level (issue 50, item
// 4: RBAC GETs at a kube-apiserver restart had a p99 several times
// stock's): resources caches, each over objects objects, start at once
// over one etcd whose history holds events updates spread over them, while
// restartProbers goroutines GET one object of the first resource through
// its cache with resourceVersion "" (a consistent read, which either cache
// sends to etcd). The figures: the GETs' latency from the caches' start
// until restartAfterReady after every cache is ready, against the same GETs
// before the start (the caches absent); the time until every cache is
// ready; then, as the restart's clients come back, two rounds of one watch
// per resource resuming, from restartNearReach behind etcd and from before
// the whole history (upstream's cache answers 410; watchkeeper's fills the
// gap from etcd when it is within cacher.DefaultBackfillMaxRevisions; no
// cache, None, is an etcd watch from there) and the GETs' latency
// meanwhile. Writes outside the resources go on throughout
// (restartWriteInterval).
func Restart(ctx context.Context, env Env, decorator string, resources, objects, events int) ([]result.Result, error) {
	rec := result.NewRecorder("restart", Level, decorator, map[string]int{"resources": resources, "objects": objects, "events": events})
	if resources < 1 || objects < 1 {
		return nil, fmt.Errorf("restart needs resources and objects, got %d and %d", resources, objects)
	}
	envs := make([]Env, resources)
	for i := range envs {
		envs[i] = env
		envs[i].Prefix = path.Join(env.Prefix, fmt.Sprintf("r%02d", i))
	}
	resumeFrom, err := restartFill(ctx, env, envs, objects, events)
	if err != nil {
		return nil, err
	}
	raw, rawDestroy, err := openRawStorage(envs[0])
	if err != nil {
		return nil, err
	}
	defer rawDestroy()
	writes, err := startRVMover(env, restartWriteInterval)
	if err != nil {
		return nil, err
	}
	defer writes.stop()

	// Before: the same GETs straight to etcd, no cache starting.
	var before histogram.Histogram
	if err := restartProbe(ctx, raw, &before, nil, 3*time.Second); err != nil {
		return nil, err
	}

	// During: every cache built at once, the GETs through the first one's,
	// until every cache is ready.
	start := time.Now()
	caches := make([]storage.Interface, resources)
	for i := range caches {
		s, destroy, err := buildRestartCache(envs[i], decorator)
		if err != nil {
			return nil, err
		}
		defer destroy()
		caches[i] = s
	}
	var during histogram.Histogram
	var readyAt atomic.Int64
	allReady := make(chan error, 1)
	go func() {
		for _, s := range caches {
			if err := waitReady(ctx, s, pods); err != nil {
				allReady <- err
				return
			}
		}
		readyAt.Store(int64(time.Since(start)))
		// The backfills after the lists run on after ready.
		select {
		case <-time.After(restartAfterReady):
		case <-ctx.Done():
		}
		allReady <- nil
	}()
	if err := restartProbe(ctx, caches[0], &during, allReady, 0); err != nil {
		return nil, err
	}

	// Then the clients come back: one watch per resource resumes, first
	// from restartNearReach revisions behind etcd (a client that missed a
	// few seconds: within a backfill's reach), then from before the whole
	// history (a client that missed everything, as a restart's kubelets and
	// controllers did before the old server bookmarked them), while the
	// GETs go on for restartResumeFor each. The near ones go first: the far
	// ones' backfill would fill the history they need.
	current, err := raw.GetCurrentResourceVersion(ctx)
	if err != nil {
		return nil, err
	}
	stopProfile := profileWindow(env.WindowProfile)
	near, err := restartResumes(ctx, caches, current-min(restartNearReach, uint64(events)/2))
	stopProfile()
	if err != nil {
		return nil, err
	}
	far, err := restartResumes(ctx, caches, resumeFrom)
	if err != nil {
		return nil, err
	}

	rec.Add("ready_seconds", time.Duration(readyAt.Load()).Seconds(), "s", result.Lower)
	near.record(rec, "resuming_near")
	far.record(rec, "resuming")
	rec.Add("get_before_p50_ms", ms(before.Quantile(0.50)), "ms", result.Lower)
	rec.Add("get_before_p99_ms", ms(before.Quantile(0.99)), "ms", result.Lower)
	rec.Add("get_during_p50_ms", ms(during.Quantile(0.50)), "ms", result.Lower)
	rec.Add("get_during_p99_ms", ms(during.Quantile(0.99)), "ms", result.Lower)
	rec.Add("get_during_max_ms", ms(during.Max()), "ms", result.Lower)
	rec.Add("gets_during", float64(during.Count()), "gets", result.Higher)
	return rec.Results(), nil
}

// restartFill creates objects pods in each resource, then makes events
// updates to them round robin over the resources, so that each cache's list
// finds a history of events/resources revisions of its own among the
// others'. It returns the revision between the two: a resume from there
// reaches back over the whole history.
func restartFill(ctx context.Context, env Env, envs []Env, objects, events int) (uint64, error) {
	c, err := newEtcdClient(env)
	if err != nil {
		return 0, err
	}
	defer func() { _ = c.Close() }()
	writers := make([]*podWriter, len(envs))
	for i, e := range envs {
		writers[i] = &podWriter{client: c, keyPrefix: path.Join("/", e.Prefix) + "/"}
	}
	put := func(i int) error {
		r := i % len(envs)
		n := (i / len(envs)) % objects
		_, err := writers[r].put(ctx, benchPod(fmt.Sprintf("p-%d", n), time.Time{}))
		return err
	}
	created := len(envs) * objects
	if err := runIndexed(fanOutWriters, created, put); err != nil {
		return 0, err
	}
	resp, err := c.Get(ctx, "restart-revision-probe")
	if err != nil {
		return 0, err
	}
	from := uint64(resp.Header.Revision)
	return from, runIndexed(fanOutWriters, events, func(i int) error { return put(created + i) })
}

// restartResumed is what one round of resumes saw: the GETs meanwhile and
// how each resume was answered.
type restartResumed struct {
	gets           histogram.Histogram
	answered, gone atomic.Int64
}

func (r *restartResumed) record(rec *result.Recorder, phase string) {
	rec.Add("get_"+phase+"_p50_ms", ms(r.gets.Quantile(0.50)), "ms", result.Lower)
	rec.Add("get_"+phase+"_p99_ms", ms(r.gets.Quantile(0.99)), "ms", result.Lower)
	rec.Add("get_"+phase+"_max_ms", ms(r.gets.Max()), "ms", result.Lower)
	rec.Add(strings.Replace(phase, "resuming", "resumes", 1)+"_answered", float64(r.answered.Load()), "watches", result.Higher)
	rec.Add(strings.Replace(phase, "resuming", "resumes", 1)+"_410", float64(r.gone.Load()), "watches", result.Lower)
}

// restartResumes opens one watch per cache from rv and waits for its first
// event (an event is answered, a 410 gone) while the GETs probe the first
// cache, for restartResumeFor.
func restartResumes(ctx context.Context, caches []storage.Interface, rv uint64) (*restartResumed, error) {
	r := &restartResumed{}
	resumed := make(chan error, 1)
	resumeCtx, stopResumes := context.WithCancel(ctx)
	defer stopResumes()
	go func() {
		var wg sync.WaitGroup
		for _, s := range caches {
			wg.Go(func() {
				w, err := s.Watch(resumeCtx, resourcePrefix, storage.ListOptions{
					ResourceVersion: fmt.Sprint(rv), Recursive: true, Predicate: storage.Everything,
				})
				if err != nil {
					r.gone.Add(1)
					return
				}
				defer w.Stop()
				select {
				case ev, ok := <-w.ResultChan():
					if !ok || ev.Type == "ERROR" {
						r.gone.Add(1)
					} else {
						r.answered.Add(1)
					}
				case <-resumeCtx.Done():
				}
			})
		}
		select {
		case <-time.After(restartResumeFor):
		case <-ctx.Done():
		}
		stopResumes()
		wg.Wait()
		resumed <- nil
	}()
	return r, restartProbe(ctx, caches[0], &r.gets, resumed, 0)
}

// runIndexed runs do(0..n-1) from writers goroutines, in order per
// goroutine, and returns the first error.
func runIndexed(writers, n int, do func(i int) error) error {
	var next atomic.Int64
	return runWriters(writers, func() error {
		for {
			i := int(next.Add(1) - 1)
			if i >= n {
				return nil
			}
			if err := do(i); err != nil {
				return err
			}
		}
	})
}

// restartProbe GETs the first pod of s from restartProbers goroutines,
// recording each GET's latency in h, for d (d > 0) or until done sends.
func restartProbe(ctx context.Context, s storage.Interface, h *histogram.Histogram, done <-chan error, d time.Duration) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	key, kerr := podKey(benchPod("p-0", time.Time{}))
	if kerr != nil {
		return kerr
	}
	var wg sync.WaitGroup
	for range restartProbers {
		wg.Go(func() {
			for ctx.Err() == nil {
				t0 := time.Now()
				err := s.Get(ctx, key, storage.GetOptions{ResourceVersion: ""}, &example.Pod{})
				if err != nil && ctx.Err() == nil && !storage.IsNotFound(err) {
					// A GET the cache refused (429 while it starts) is
					// retried, as a client would; only answers count.
					time.Sleep(10 * time.Millisecond)
					continue
				}
				h.Record(time.Since(t0))
			}
		})
	}
	var err error
	if d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	} else {
		select {
		case err = <-done:
		case <-ctx.Done():
		}
	}
	cancel()
	wg.Wait()
	return err
}

// buildRestartCache is buildCache; None, the raw etcd3 storage (every
// resume an etcd watch from its RV: what serving it costs etcd with no
// cache at all); and watchkeeper with no backfill after its list built as
// the decorator builds it but for that one setting.
func buildRestartCache(env Env, name string) (storage.Interface, func(), error) {
	if name != WatchkeeperNoBackfill && name != None {
		return buildCache(env, name, pods)
	}
	config := pods.config(env)
	raw, destroyRaw, err := generic.NewRawStorage(config, pods.newFunc, pods.newListFunc, fixtures.PodReverseKeyFunc(resourcePrefix), resourcePrefix)
	if err != nil {
		return nil, nil, err
	}
	if name == None {
		return raw, destroyRaw, nil
	}
	cfg := decorator.Schedule(options.NewWatchCacheOptions(), schema.GroupResource{Resource: "pods"})
	cfg.ListBackfillRevisions = 0
	cfg.Storage, cfg.Versioner, cfg.ResourcePrefix = raw, storage.APIObjectVersioner{}, resourcePrefix
	cfg.KeyFunc, cfg.NewFunc, cfg.NewListFunc, cfg.GetAttrsFunc = podKey, pods.newFunc, pods.newListFunc, pods.attrs
	cfg.IndexerFuncs, cfg.Indexers, cfg.Codec = pods.triggers(), pods.indexers(), config.Codec
	c, err := cacher.New(cfg)
	if err != nil {
		destroyRaw()
		return nil, nil, err
	}
	return c, func() { c.Stop(); destroyRaw() }, nil
}
