package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"

	"github.com/watchkeeper/watchkeeper/cacher"
	"github.com/watchkeeper/watchkeeper/internal/etcdtest"
	"github.com/watchkeeper/watchkeeper/internal/testchild"
)

// The third fault of issue 6: a 3-member etcd cluster loses its leader,
// later one follower, then its quorum for a few seconds, while writers keep
// writing through a watchkeeper cache (storage level, its etcd client given
// the first followers' endpoints) and ~20 watchers with selectors follow it.
// The cache must ride every fault out (issue 11): no relist, no client watch
// ended, ready throughout. Each watcher behaves as a client does:
// when its watch ends it resumes from the last RV it saw (event or
// bookmark), and when that gets 410 it re-lists (a consistent list) and
// watches from the list's RV. At the end every watcher's view is checked
// against etcd's own history for its selector:
//
//   - within each stretch between re-lists, the events are exactly etcd's
//     changes for the selector, in order, once: none lost, none duplicated,
//     none invented; only the stretch ended by a 410 may stop short, since
//     the re-list that follows stands for what came after;
//   - every re-list is exactly etcd's state at the list's RV for the
//     selector;
//   - the last stretch runs to the end: the watcher's view ends equal to
//     etcd's final state.
//
// The figures (events written, delivered, lost, duplicated, restarts, 410s,
// re-lists) are logged. Helpers here carry an ll prefix; they reuse
// churn_test.go's selectors, churnExpected, churnHistory, churnMarker,
// churnDecode and churnDiff.

const (
	llWatchers = 20
	llWriters  = 4
	llNames    = 8 // per namespace
	// llElection bounds the wait for a new leader, and for a member's
	// restart.
	llElection = 15 * time.Second
	// llSettle bounds the wait for every watcher to reach the end.
	llSettle = 20 * time.Second
)

// llSetup is setup() over a cluster: the etcd3 store's client gets the
// given members' endpoints and fails over between them.
func llSetup(t *testing.T, endpoints []string, opts ...setupOption) *env {
	t.Helper()
	client, err := kubernetes.New(clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          10 * time.Second,
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		Logger:               zaptest.NewLogger(t, zaptest.Level(zapcore.ErrorLevel)).Named("etcd-client"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	raw := newPodStore(t, client, protoCodec, transformer, "pods")
	cfg := podCacheConfig(raw)
	for _, o := range opts {
		o(&cfg)
	}
	c, err := cacher.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatalf("cache not ready: %v", err)
	}
	return &env{cacher: c, raw: raw, client: client}
}

// llStretch is what a watcher saw from one starting point: the first
// starts at the test's start RV, each later one at a re-list.
type llStretch struct {
	from     uint64
	snapshot map[string]churnEvent // the re-list's items by key; nil for the first
	events   []churnEvent
	expired  bool // ended by a 410
}

// llWatcher is one client: a watch it resumes and, after 410, re-lists.
type llWatcher struct {
	id        int
	sel       churnSelector
	pred      storage.SelectionPredicate
	bookmarks bool
	done      chan struct{}

	mu        sync.Mutex
	stretches []llStretch
	restarts  int      // watches that ended and were resumed or re-listed
	refused   int      // watch or list calls refused (not ready)
	retried   []string // watches ended by a retriable error (504 RV too large, 429)
	errors    []string
	oddities  []string // RVs going backwards, bookmarks not asked for
	bookmarkN int
}

func (w *llWatcher) String() string {
	return fmt.Sprintf("watcher %d (%s, bookmarks=%v)", w.id, w.sel, w.bookmarks)
}

func (w *llWatcher) note(list *[]string, format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(*list) < 10 {
		*list = append(*list, fmt.Sprintf(format, args...))
	}
}

// newest is the RV of the newest event of the stretch in progress (0 for
// none).
func (w *llWatcher) newest() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.stretches[len(w.stretches)-1]
	if len(s.events) == 0 {
		return 0
	}
	return s.events[len(s.events)-1].rv
}

// run follows the cache until ctx ends, as a client would.
func (w *llWatcher) run(ctx context.Context, e *env, startRV uint64) {
	defer close(w.done)
	w.stretches = []llStretch{{from: startRV}}
	rv := startRV
	pause := func() bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
			return true
		}
	}
	for ctx.Err() == nil {
		wi, err := e.cacher.Watch(ctx, "/pods/", storage.ListOptions{
			ResourceVersion: strconv.FormatUint(rv, 10), Recursive: true, Predicate: w.pred,
		})
		if err != nil {
			w.mu.Lock()
			w.refused++
			w.mu.Unlock()
			if !pause() {
				return
			}
			continue
		}
		expired := false
		for ev := range wi.ResultChan() {
			ev = plainEvent(ev)
			if ev.Type == watch.Error {
				err := apierrors.FromObject(ev.Object)
				switch {
				case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
					expired = true
				case storage.IsTooLargeResourceVersion(err) || apierrors.IsTooManyRequests(err):
					// The cache is behind or not ready: retry, as a client does.
					w.mu.Lock()
					w.retried = append(w.retried, err.Error())
					w.mu.Unlock()
				default:
					w.note(&w.errors, "watch from rv=%d: %v", rv, err)
				}
				continue
			}
			acc, err := meta.Accessor(ev.Object)
			if err != nil {
				w.note(&w.oddities, "%s event with %T", ev.Type, ev.Object)
				continue
			}
			evRV, err := strconv.ParseUint(acc.GetResourceVersion(), 10, 64)
			if err != nil {
				w.note(&w.oddities, "%s event with resourceVersion %q", ev.Type, acc.GetResourceVersion())
				continue
			}
			if ev.Type == watch.Bookmark {
				w.mu.Lock()
				w.bookmarkN++
				w.mu.Unlock()
				if !w.bookmarks {
					w.note(&w.oddities, "bookmark at rv=%d not asked for", evRV)
				}
				if evRV < rv {
					w.note(&w.oddities, "bookmark rv=%d below the last seen rv=%d", evRV, rv)
				}
				rv = max(rv, evRV)
				continue
			}
			pod, ok := ev.Object.(*example.Pod)
			if !ok {
				w.note(&w.oddities, "%s event with %T", ev.Type, ev.Object)
				continue
			}
			// Recorded as is: the comparison finds duplicates and reordering.
			got := churnEvent{typ: ev.Type, key: pod.Namespace + "/" + pod.Name, rv: evRV, state: podState(pod)}
			w.mu.Lock()
			s := &w.stretches[len(w.stretches)-1]
			s.events = append(s.events, got)
			w.mu.Unlock()
			rv = max(rv, evRV)
		}
		wi.Stop()
		if ctx.Err() != nil {
			return
		}
		w.mu.Lock()
		w.restarts++
		w.stretches[len(w.stretches)-1].expired = expired
		w.mu.Unlock()
		if !expired {
			continue // resume from rv
		}
		// 410: re-list, as a reflector does, and watch from the list.
		for {
			list := &example.PodList{}
			err := e.cacher.GetList(ctx, "/pods/", storage.ListOptions{ResourceVersion: "", Recursive: true, Predicate: w.pred}, list)
			if err == nil {
				listRV, perr := strconv.ParseUint(list.ResourceVersion, 10, 64)
				if perr != nil {
					w.note(&w.oddities, "list resourceVersion %q", list.ResourceVersion)
					return
				}
				snap := map[string]churnEvent{}
				for i := range list.Items {
					p := &list.Items[i]
					prv, _ := strconv.ParseUint(p.ResourceVersion, 10, 64)
					snap[p.Namespace+"/"+p.Name] = churnEvent{typ: watch.Added, key: p.Namespace + "/" + p.Name, rv: prv, state: podState(p)}
				}
				w.mu.Lock()
				w.stretches = append(w.stretches, llStretch{from: listRV, snapshot: snap})
				w.mu.Unlock()
				rv = listRV
				break
			}
			w.mu.Lock()
			w.refused++
			w.mu.Unlock()
			if !pause() {
				return
			}
		}
	}
}

// llWriteStats counts what the writers did; failed are writes etcd
// refused or whose outcome the writer cannot know (timeouts while the
// leader is lost): etcd's history, not these counts, is the truth.
type llWriteStats struct {
	ok, skipped, failed atomic.Int64
	mu                  sync.Mutex
	failures            map[string]int
}

func (s *llWriteStats) fail(err error) {
	s.failed.Add(1)
	msg := err.Error()
	if len(msg) > 80 {
		msg = msg[:80]
	}
	s.mu.Lock()
	s.failures[msg]++
	s.mu.Unlock()
}

// llWrite writes at random over a small key space until ctx ends:
// creates, relabels, moves between nodes and phases, deletes. Failures are
// expected while members are down and are counted, not fatal.
func llWrite(ctx context.Context, e *env, r *rand.Rand, stats *llWriteStats) {
	pick := func(options ...string) string { return options[r.IntN(len(options))] }
	setApp := func(p *example.Pod) {
		if app := pick("a", "a", "b", "b", "c", ""); app != "" {
			p.Labels = map[string]string{"app": app}
		} else {
			p.Labels = nil
		}
	}
	for ctx.Err() == nil {
		ns := churnNamespaces[r.IntN(len(churnNamespaces))]
		name := fmt.Sprintf("p-%d", r.IntN(llNames))
		key := "/pods/" + ns + "/" + name
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var err error
		switch x := r.IntN(100); {
		case x < 35:
			pod := &example.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
			setApp(pod)
			pod.Spec.NodeName = pick("node-1", "node-2", "")
			pod.Status.Phase = example.PodPhase(pick("Pending", "Running", "Failed"))
			err = e.cacher.Create(wctx, key, pod, &example.Pod{}, 0)
		case x < 80:
			err = e.cacher.GuaranteedUpdate(wctx, key, &example.Pod{}, false, nil,
				func(in runtime.Object, _ storage.ResponseMeta) (runtime.Object, *uint64, error) {
					pod := in.(*example.Pod).DeepCopy()
					switch r.IntN(3) {
					case 0:
						setApp(pod)
					case 1:
						pod.Spec.NodeName = pick("node-1", "node-2", "")
					default:
						pod.Status.Phase = example.PodPhase(pick("Pending", "Running", "Failed"))
					}
					return pod, nil, nil
				}, nil)
		default:
			err = e.cacher.Delete(wctx, key, &example.Pod{}, nil, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{})
		}
		cancel()
		switch {
		case err == nil:
			stats.ok.Add(1)
		case storage.IsExist(err), storage.IsNotFound(err), storage.IsConflict(err):
			stats.skipped.Add(1)
		case ctx.Err() != nil:
			return
		default:
			stats.fail(err)
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func TestFaultLeaderLoss(t *testing.T) {
	t.Parallel() // in a process of its own: it reads the process-wide metrics
	if !testchild.Isolate(t) {
		return
	}
	start := time.Now()
	cluster := etcdtest.StartCluster(t, 3)
	leader, err := cluster.WaitLeader(llElection)
	if err != nil {
		t.Fatal(err)
	}
	clusterUp := time.Since(start)
	// Bookmarks every second, so bookmark watchers resume from recent RVs;
	// a history window longer than the test, so only a re-list of the
	// cache itself (not age) can send a watcher a 410.
	// The cache's etcd client talks to the followers only: when the leader
	// is lost, a follower cancels every watch opened WithRequireLeader with
	// "etcdserver: no leader", the error the cache must ride out.
	var followers []string
	firstLeader := leader
	for i, m := range cluster.Members {
		if i != firstLeader {
			followers = append(followers, m.Endpoint())
		}
	}
	e := llSetup(t, followers, nodeNameIndex, withSchedule(time.Second, 500*time.Millisecond, 5*time.Minute))
	gr := map[string]string{"group": "", "resource": "pods"}
	initsBefore, _ := metricValue(t, "apiserver_watch_cache_initializations_total", gr)
	lostBefore, _ := metricValue(t, "apiserver_watch_cache_initialization_errors_total", gr)
	retriesBefore, _ := metricValue(t, "watchkeeper_watch_cache_storage_watch_retries_total", gr)
	terminatedBefore, _ := metricValue(t, "apiserver_terminated_watchers_total", gr)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	startRV := churnMarker(ctx, t, e, "start")
	t.Logf("cluster of 3 up in %v, member %d leads; cache ready; start rv=%d", clusterUp.Round(time.Millisecond), leader, startRV)

	watchCtx, stopWatchers := context.WithCancel(ctx)
	defer stopWatchers()
	watchers := make([]*llWatcher, llWatchers)
	for i := range watchers {
		sel := churnSelectors[i%len(churnSelectors)]
		bookmarks := i%2 == 0
		w := &llWatcher{id: i, sel: sel, bookmarks: bookmarks, done: make(chan struct{})}
		w.pred = sel.predicate(t, bookmarks)
		watchers[i] = w
		go w.run(watchCtx, e, startRV)
	}
	defer func() {
		stopWatchers()
		for _, w := range watchers {
			<-w.done
		}
	}()

	stats := &llWriteStats{failures: map[string]int{}}
	writeCtx, stopWriters := context.WithCancel(ctx)
	var writers sync.WaitGroup
	defer func() { stopWriters(); writers.Wait() }()
	seed := uint64(time.Now().UnixNano())
	for i := range llWriters {
		writers.Go(func() { llWrite(writeCtx, e, rand.New(rand.NewPCG(seed, uint64(i))), stats) })
	}
	t0 := time.Now()
	var timelineMu sync.Mutex
	var timeline []string
	mark := func(format string, args ...any) {
		timelineMu.Lock()
		defer timelineMu.Unlock()
		timeline = append(timeline, fmt.Sprintf("%+.2fs (%d writes) ", time.Since(t0).Seconds(), stats.ok.Load())+fmt.Sprintf(format, args...))
	}
	// The cache's readiness (what /readyz reports) over the whole fault,
	// sampled every 10ms: each change goes on the timeline.
	readySamples, notReadySamples := llSampleReadiness(watchCtx, e.cacher, mark)
	mark("writers started, seed %d", seed)
	time.Sleep(2 * time.Second)

	// The leader is lost.
	leader = cluster.Leader()
	if leader < 0 {
		t.Fatal("no leader before the fault")
	}
	killStart := time.Now()
	cluster.Members[leader].Kill()
	mark("killed the leader, member %d (Kill took %v: it waits for etcd to cut its gRPC streams)", leader, time.Since(killStart).Round(time.Millisecond))
	next, err := cluster.WaitLeader(llElection)
	if err != nil {
		t.Fatal(err)
	}
	mark("member %d elected", next)
	time.Sleep(2 * time.Second)
	cluster.Members[leader].Restart()
	mark("member %d restarted and ready", leader)
	time.Sleep(1500 * time.Millisecond)

	// Then one follower, another member than the one lost before.
	follower := -1
	for i, m := range cluster.Members {
		if i != leader && m.Running() && !m.IsLeader() {
			follower = i
			break
		}
	}
	if follower < 0 {
		t.Fatal("no follower to stop")
	}
	killStart = time.Now()
	cluster.Members[follower].Kill()
	mark("killed follower member %d (Kill took %v; leader: member %d)", follower, time.Since(killStart).Round(time.Millisecond), cluster.Leader())
	time.Sleep(2 * time.Second)
	cluster.Members[follower].Restart()
	mark("member %d restarted and ready", follower)
	time.Sleep(1500 * time.Millisecond)

	// Then quorum: the leader and one follower down together, so the last
	// member stays without a leader for longer than etcd's leader monitor
	// allows (3 election timeouts, ~3s) and cancels every watch opened
	// WithRequireLeader with "etcdserver: no leader", then refuses new ones
	// until the others are back: the cache must ride that out.
	if _, err := cluster.WaitLeader(llElection); err != nil {
		t.Fatal(err)
	}
	// The member left up is one the cache's client knows (not the first
	// leader), so the cache hears "no leader" from it rather than losing
	// every endpoint (an outage, which the silence check handles).
	lead := cluster.Leader()
	survivor := -1
	for i := range cluster.Members {
		if i != lead && i != firstLeader {
			survivor = i
			break
		}
	}
	down := []int{lead}
	for i := range cluster.Members {
		if i != lead && i != survivor {
			down = append(down, i)
		}
	}
	killStart = time.Now()
	for _, i := range down {
		cluster.Members[i].Kill()
	}
	mark("killed the leader, member %d, and member %d: no quorum (Kill took %v)", down[0], down[1], time.Since(killStart).Round(time.Millisecond))
	time.Sleep(5 * time.Second)
	for _, i := range down {
		cluster.Members[i].Restart()
	}
	next, err = cluster.WaitLeader(llElection)
	if err != nil {
		t.Fatal(err)
	}
	mark("members %v restarted, member %d elected", down, next)
	time.Sleep(1500 * time.Millisecond)
	stopWriters()
	writers.Wait()
	mark("writers stopped")
	timelineMu.Lock()
	for _, l := range timeline {
		t.Logf("timeline: %s", l)
	}
	timelineMu.Unlock()

	finalRV := churnMarker(ctx, t, e, "end")
	if err := e.cacher.Get(ctx, "/pods/marker/end", storage.GetOptions{ResourceVersion: strconv.FormatUint(finalRV, 10)}, &example.Pod{}); err != nil {
		t.Fatalf("cache did not reach the final rv=%d: %v", finalRV, err)
	}
	changes := churnHistory(ctx, t, e, startRV, finalRV)
	initial := llStateAt(ctx, t, e, startRV)

	// Wait until every watcher has had its fence, an event past the final
	// marker (churnFence): events reach a watcher in RV order, so by then
	// whatever it was sent up to the final marker, a duplicate or a stray
	// included, has arrived.
	settleStart := time.Now()
	churnFence(ctx, t, e)
	behind := func() (n int) {
		for _, w := range watchers {
			if w.newest() <= finalRV {
				n++
			}
		}
		return n
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, llSettle, true, func(context.Context) (bool, error) {
		return behind() == 0, nil
	}); err != nil {
		t.Errorf("%d watchers have had no event past the final marker rv=%d %v after the last write (%v)", behind(), finalRV, llSettle, err)
	}
	settled := time.Since(settleStart)
	stopWatchers()
	for _, w := range watchers {
		select {
		case <-w.done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%v did not stop 10s after its context ended", w)
		}
	}

	// A write whose outcome its writer never learned (a deadline during the
	// quorum loss) may still be applied after the final marker, when etcd
	// gets to it: a real change, in etcd's history past the marker, which
	// the watchers rightly get. Read that part of the history too.
	now, err := e.client.Client.Get(ctx, "/registry/pods/marker/end")
	if err != nil {
		t.Fatal(err)
	}
	lateWrites := map[string]bool{}
	if uint64(now.Header.Revision) > finalRV {
		for _, c := range churnHistory(ctx, t, e, finalRV, uint64(now.Header.Revision)) {
			lateWrites[fmt.Sprintf("%s@%d", c.key, c.rev)] = true
		}
	}

	// Compare each watcher's view with etcd's history.
	var fig struct {
		delivered, lost, dup, spurious, skipped      int
		restarts, expired, relists, refused, retried int
		bookmarks, failed                            int
	}
	for _, w := range watchers {
		bad := false
		for _, msg := range append(w.errors, w.oddities...) {
			t.Errorf("%v: %s", w, msg)
			bad = true
		}
		fig.restarts += w.restarts
		fig.refused += w.refused
		fig.retried += len(w.retried)
		fig.bookmarks += w.bookmarkN
		fig.relists += len(w.stretches) - 1
		for i, s := range w.stretches {
			last := i == len(w.stretches)-1
			to := finalRV
			if !last {
				to = w.stretches[i+1].from
				fig.expired++
			}
			if s.snapshot != nil {
				want := llSelect(t, w.pred, llApply(initial, changes, s.from))
				if fmt.Sprint(llSorted(want)) != fmt.Sprint(llSorted(s.snapshot)) {
					t.Errorf("%v: re-list at rv=%d differs from etcd's state at that rv:\n got  %v\n want %v", w, s.from, llSorted(s.snapshot), llSorted(want))
					bad = true
				}
			}
			want := churnExpected(t, w.pred, llAfter(changes, s.from, to))
			// The fence is not compared; past the final marker there must be
			// nothing but fence pods and etcd's own late writes.
			if j := slices.IndexFunc(s.events, func(ev churnEvent) bool { return ev.rv > finalRV }); j >= 0 {
				for _, ev := range s.events[j:] {
					if lateWrites[fmt.Sprintf("%s@%d", ev.key, ev.rv)] {
						t.Logf("%v: a write applied after the final marker, in etcd's history: %v", w, ev)
						continue
					}
					if !strings.HasPrefix(ev.key, "fence") && !strings.Contains(ev.key, "/fence-") {
						t.Errorf("%v: event past the final marker that is not a fence: %v", w, ev)
						bad = true
					}
				}
				s.events = s.events[:j]
			}
			c := llCount(want, s.events, last)
			fig.delivered += len(s.events)
			fig.lost += c.lost
			fig.dup += c.dup
			fig.spurious += c.spurious
			fig.skipped += c.skipped
			if c.lost+c.dup+c.spurious > 0 || c.mismatch >= 0 {
				t.Errorf("%v, stretch %d from rv=%d to %d (ended by 410: %v): lost %d, duplicated %d, not in etcd's history %d; first difference at %d (want %d events, got %d)\n%s",
					w, i, s.from, to, s.expired, c.lost, c.dup, c.spurious, c.mismatch, len(want), len(s.events), churnDiff(want, s.events, max(c.mismatch, 0)))
				bad = true
			}
			if !last && !s.expired {
				t.Errorf("%v: stretch %d was followed by a re-list without a 410", w, i)
				bad = true
			}
		}
		if bad {
			fig.failed++
		}
	}
	inits, found := metricValue(t, "apiserver_watch_cache_initializations_total", gr)
	if !found {
		t.Errorf("no apiserver_watch_cache_initializations_total for %v", gr)
	}
	lost, _ := metricValue(t, "apiserver_watch_cache_initialization_errors_total", gr)
	t.Logf("writes: %d succeeded (an update that changes nothing writes nothing), %d skipped (conflict/exists/not found), %d failed or outcome unknown %v; etcd history: %d changes in (%d, %d]",
		stats.ok.Load(), stats.skipped.Load(), stats.failed.Load(), stats.failures, len(changes), startRV, finalRV)
	t.Logf("watchers: %d; delivered %d, lost %d, duplicated %d, not in etcd's history %d; skipped because a 410 led to a re-list %d",
		len(watchers), fig.delivered, fig.lost, fig.dup, fig.spurious, fig.skipped)
	t.Logf("watcher restarts %d (watch ended, resumed or re-listed), 410s %d, re-lists %d, watches ended by a retriable error %d, calls refused while not ready %d, bookmarks %d; the cache lost its etcd watch %v times and re-listed %v times; %d watchers failed",
		fig.restarts, fig.expired, fig.relists, fig.retried, fig.refused, fig.bookmarks, lost-lostBefore, inits-initsBefore, fig.failed)
	t.Logf("timing: settled %v after the end marker; total %v", settled.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	retries, _ := metricValue(t, "watchkeeper_watch_cache_storage_watch_retries_total", gr)
	terminated, _ := metricValue(t, "apiserver_terminated_watchers_total", gr)
	t.Logf("cache: storage watch re-opened %v times; readiness sampled %d times, not ready %d times; watchers terminated by the cache %v",
		retries-retriesBefore, readySamples.Load(), notReadySamples.Load(), terminated-terminatedBefore)

	if retries-retriesBefore == 0 {
		t.Errorf("the cache never re-opened its etcd watch: a leader loss it rode out should show here")
	}
	// What clients must see across leader elections (issue 11): the cache
	// re-opens its etcd watch and keeps everything.
	if d := inits - initsBefore; d != 0 {
		t.Errorf("the cache re-listed %v times across the elections, want 0", d)
	}
	if d := lost - lostBefore; d != 0 {
		t.Errorf("the cache gave up its etcd watch %v times, want 0", d)
	}
	if fig.restarts != 0 || fig.relists != 0 || fig.expired != 0 {
		t.Errorf("client watches ended %d times (410s %d, re-lists %d), want 0: the cache must keep its watchers", fig.restarts, fig.expired, fig.relists)
	}
	if d := terminated - terminatedBefore; d != 0 {
		t.Errorf("the cache terminated %v watchers, want 0", d)
	}
	if n := notReadySamples.Load(); n != 0 {
		t.Errorf("the cache was not ready in %d of %d samples, want 0", n, readySamples.Load())
	}
	if fig.lost != 0 || fig.dup != 0 {
		t.Errorf("lost %d, duplicated %d; want 0 and 0", fig.lost, fig.dup)
	}
}

// llSampleReadiness samples c.Ready() every 10ms until ctx ends, marking
// each change on the timeline, and counts the samples.
func llSampleReadiness(ctx context.Context, c *cacher.Cacher, mark func(string, ...any)) (all, notReady *atomic.Int64) {
	all, notReady = &atomic.Int64{}, &atomic.Int64{}
	go func() {
		last := true
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			ready := c.Ready()
			all.Add(1)
			if !ready {
				notReady.Add(1)
			}
			if ready != last {
				mark("cache ready: %v", ready)
				last = ready
			}
		}
	}()
	return all, notReady
}

// llAfter is the changes in (from, to].
func llAfter(changes []churnChange, from, to uint64) []churnChange {
	var out []churnChange
	for _, c := range changes {
		if c.rev > from && c.rev <= to {
			out = append(out, c)
		}
	}
	return out
}

// llStateAt is etcd's own state of the pods at rv.
func llStateAt(ctx context.Context, t *testing.T, e *env, rv uint64) map[string]*example.Pod {
	t.Helper()
	const prefix = "/registry/pods/"
	resp, err := e.client.Client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(int64(rv)))
	if err != nil {
		t.Fatalf("etcd state at rv=%d: %v", rv, err)
	}
	out := map[string]*example.Pod{}
	for _, kv := range resp.Kvs {
		out[strings.TrimPrefix(string(kv.Key), prefix)] = churnDecode(t, kv.Value, uint64(kv.ModRevision))
	}
	return out
}

// llApply is the state at rv: initial with the changes up to rv applied.
func llApply(initial map[string]*example.Pod, changes []churnChange, rv uint64) map[string]*example.Pod {
	out := make(map[string]*example.Pod, len(initial))
	for k, v := range initial {
		out[k] = v
	}
	for _, c := range changes {
		if c.rev > rv {
			break
		}
		if c.cur == nil {
			delete(out, c.key)
		} else {
			out[c.key] = c.cur
		}
	}
	return out
}

// llSelect is what a list with pred returns of state, as the snapshot
// records it.
func llSelect(t *testing.T, pred storage.SelectionPredicate, state map[string]*example.Pod) map[string]churnEvent {
	t.Helper()
	out := map[string]churnEvent{}
	for k, p := range state {
		ok, err := pred.Matches(p)
		if err != nil {
			t.Fatalf("matching %s: %v", k, err)
		}
		if ok {
			rv, _ := strconv.ParseUint(p.ResourceVersion, 10, 64)
			out[k] = churnEvent{typ: watch.Added, key: k, rv: rv, state: podState(p)}
		}
	}
	return out
}

func llSorted(m map[string]churnEvent) []string {
	out := make([]string, 0, len(m))
	for _, e := range m {
		out = append(out, fmt.Sprintf("%s@%d{%s}", e.key, e.rv, e.state))
	}
	slices.Sort(out)
	return out
}

// llCounts compares a stretch's events with etcd's for it.
type llCounts struct {
	lost, dup, spurious, skipped int
	mismatch                     int // first index where got and want differ, -1 if none
}

// llCount counts, by (key, rv): events delivered more than once, events
// not in want, and events of want not delivered. In a stretch a 410 ended
// (complete false) the want events after the last one delivered are not
// lost but skipped: the re-list covers them. Order and content are checked
// by the index of the first difference.
func llCount(want, got []churnEvent, complete bool) llCounts {
	type id struct {
		key string
		rv  uint64
	}
	inWant := map[id]bool{}
	for _, e := range want {
		inWant[id{e.key, e.rv}] = true
	}
	seen := map[id]bool{}
	var c llCounts
	var lastRV uint64
	for _, e := range got {
		k := id{e.key, e.rv}
		switch {
		case seen[k]:
			c.dup++
		case !inWant[k]:
			c.spurious++
		}
		seen[k] = true
		lastRV = max(lastRV, e.rv)
	}
	for _, e := range want {
		if seen[id{e.key, e.rv}] {
			continue
		}
		if complete || e.rv < lastRV {
			c.lost++
		} else {
			c.skipped++
		}
	}
	c.mismatch = -1
	n := len(got)
	if complete {
		n = max(n, len(want))
	}
	for i := range n {
		if i >= len(got) || i >= len(want) || got[i] != want[i] {
			c.mismatch = i
			break
		}
	}
	return c
}
