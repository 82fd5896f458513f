package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/etcd3"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/watchkeeper/watchkeeper/cacher"
	"github.com/watchkeeper/watchkeeper/internal/etcdtest"
	clientset "github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/generated/clientset/versioned"
)

// The second fault of issue 6: etcd compacts past the resourceVersion a
// client holds while the client is away. Issue 6 asked for a 410 there;
// issue 11 ("never a 410 where upstream's cache would resume") changed it:
// upstream's cache serves the resume from its buffer whatever etcd compacted
// (its compactor prunes only the list snapshots), and so does ours, from
// the events etcd sent before it compacted. What must hold is that the
// resume is exactly etcd's history, that a cache without that history
// (started after the compaction) answers 410, that a client re-listing
// then converges on etcd, and that nothing stale is listed.
//
// The compaction is done the way kube-apiserver's compactor does it
// (etcd3.Compact: record the revision under compact_rev_key, then
// clientv3's Compact). The etcd3 store learns compactions from that key,
// and the cache from the store. A bare clientv3 Compact, which no apiserver
// hears of, is tried first at the storage level: the cache may then go on
// serving its in-memory history; whatever it serves must be exactly etcd's.
//
// "Nothing stale", precisely: let C be the compaction revision. Every list
// the cache serves once the compaction is known (RV "0" and RV ""), at list
// resourceVersion r, is exactly etcd's state at max(r, C), read back from
// etcd at that revision. So no object is older than etcd's at C: an RV "0"
// list may lag etcd's revision, but only across revisions that changed
// nothing of the resource. A consistent list (RV "") must moreover be at or
// above the revision etcd reported just before it was asked.
//
// The history window is 5 minutes throughout. Over HTTP the same run is
// made against upstream's cache as the reference.
//
// Helpers here carry an fc prefix; they reuse harness_test.go's setup and
// compaction, behaviour_test.go's bh* pod helpers, churn_test.go's
// churnHistory and churnExpected, sampleserver_watch_test.go's ss* HTTP
// helpers, fault_leader_loss_test.go's llStateAt, llSelect and llSorted,
// and fault_etcd_restart_test.go's feWriter, feEtcdWidgets, feStore and
// feRecorder.

func TestFaultCompaction(t *testing.T) {
	t.Parallel() // its own etcds, cache and servers; no gate, no process-wide metric
	t.Run("cache", fcCache)
	// Upstream's cache on the same work, as the reference: both resume the
	// held RVs from memory after the compaction.
	for _, decorator := range []string{"watchkeeper", "upstream"} {
		t.Run("http-"+decorator, func(t *testing.T) {
			t.Parallel()
			fcHTTP(t, decorator)
		})
	}
}

// fcCache: a storage-level watcher of the cache.
func fcCache(t *testing.T) {
	start := time.Now()
	e := setup(t, withSchedule(time.Second, 500*time.Millisecond, 5*time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	const ns = "compact"
	for i := range 6 {
		bhCreatePod(ctx, t, e, ns, fmt.Sprintf("p-%d", i))
	}

	// The client lists, watches for a while, then falls behind holding held.
	list := &example.PodList{}
	if err := e.cacher.GetList(ctx, "/pods/", storage.ListOptions{ResourceVersion: "", Recursive: true, Predicate: storage.Everything}, list); err != nil {
		t.Fatal(err)
	}
	w, err := e.cacher.Watch(ctx, "/pods/", storage.ListOptions{ResourceVersion: list.ResourceVersion, Recursive: true, Predicate: storage.Everything})
	if err != nil {
		t.Fatal(err)
	}
	bhRelabelPod(ctx, t, e, ns, "p-0", "1")
	last := bhRelabelPod(ctx, t, e, ns, "p-1", "1")
	for range 2 {
		bhNext(t, w, 10*time.Second)
	}
	w.Stop()
	held := bhRvOf(t, last)

	// Writes go on while the client is away.
	cur := fcPodWrites(ctx, t, e, ns, "a")
	changes := churnHistory(ctx, t, e, held, cur)
	want := churnExpected(t, storage.Everything, changes)
	got := fcWatchPods(ctx, t, e, held, len(want))
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("before any compaction, a watch from rv=%d:\n got  %v\n want %v", held, got, want)
	}
	t.Logf("client holds rv=%d; %d changes since; before any compaction a watch from it gets all %d", held, len(want), len(got))

	// A bare clientv3 Compact: etcd forgets, the apiserver is not told.
	if _, err := e.client.Client.Compact(ctx, int64(cur)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Client.Get(ctx, "/registry/pods/", clientv3.WithPrefix(), clientv3.WithRev(int64(held))); err == nil {
		t.Fatalf("etcd still serves rv=%d after compacting at %d", held, cur)
	}
	bare := fcFirstEvent(ctx, t, e.cacher, held)
	switch {
	case bare.expired:
		t.Logf("after a bare compaction at %d (store's compact revision %d), a watch from rv=%d gets 410: %s", cur, e.raw.CompactRevision(), held, bare.desc)
	default:
		got := fcWatchPods(ctx, t, e, held, len(want))
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("after a bare compaction the cache served a watch from rv=%d that differs from etcd's history:\n got  %v\n want %v", held, got, want)
		}
		t.Logf("after a bare compaction at %d (not recorded under compact_rev_key; store's compact revision %d), a watch from rv=%d is served from the cache's history: %d events, equal to etcd's",
			cur, e.raw.CompactRevision(), held, len(got))
	}

	// The apiserver's compaction, which the store (and so the cache) hears
	// of. The cache goes on serving the resume from its history, as
	// upstream's cache does (issue 11): its events are etcd's, recorded
	// before the compaction.
	// etcd's history before cur went with the bare compaction: the
	// changes since it are read from there on.
	bareAt := cur
	cur = fcPodWrites(ctx, t, e, ns, "b")
	changes = append(changes, churnHistory(ctx, t, e, bareAt, cur)...)
	want = churnExpected(t, storage.Everything, changes)
	compaction(e)(ctx, t, strconv.FormatUint(cur, 10))
	fcWaitHeard(ctx, t, e.cacher, held, cur)
	got = fcWatchPods(ctx, t, e, held, len(want))
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after compacting at %d, a watch from rv=%d is not etcd's history recorded before it:\n got  %v\n want %v", cur, held, got, want)
	}
	t.Logf("after compacting at %d (the store's compact revision is %d), a watch from rv=%d is served from the history: %d events, equal to etcd's", cur, e.raw.CompactRevision(), held, len(got))

	// A cache that starts after the compaction (a replica restarted) has no
	// history back to held, and etcd cannot fill it in: 410. It is stopped
	// at once: a second cache of the resource on the same etcd client (which
	// no server has) shares its gRPC stream, and progress answers then came
	// 3s late to the first.
	second, err := cacher.New(podCacheConfig(newPodStore(t, e.client, protoCodec, transformer, "pods")))
	if err != nil {
		t.Fatal(err)
	}
	if err := second.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	ev := fcFirstEvent(ctx, t, second, held)
	second.Stop()
	if !ev.expired {
		t.Fatalf("a cache started after compacting at %d: a watch from rv=%d got %s, want 410 Expired", cur, held, ev.desc)
	}
	t.Logf("a cache started after the compaction: a watch from rv=%d: %s", held, ev.desc)

	// Nothing stale: lists at RV "0" and "" are etcd's state at their RV,
	// at or above the compaction.
	for _, rv := range []string{"0", ""} {
		before := bhCurrentRV(ctx, t, e)
		list := &example.PodList{}
		if err := e.cacher.GetList(ctx, "/pods/", storage.ListOptions{ResourceVersion: rv, Recursive: true, Predicate: storage.Everything}, list); err != nil {
			t.Fatalf("list at rv=%q: %v", rv, err)
		}
		listRV := mustParseRV(t, list.ResourceVersion)
		fcCheckList(ctx, t, e, fmt.Sprintf("list at rv=%q", rv), list, listRV, cur)
		if rv == "" && listRV < before {
			t.Errorf("consistent list at rv=%d, below etcd's revision %d before it was asked", listRV, before)
		}
		t.Logf("list at rv=%q after the compaction: %d pods at rv=%d, equal to etcd's at rv=%d", rv, len(list.Items), listRV, max(listRV, cur))
	}

	// The client re-lists and watches from the list; writes go on; its view
	// converges on etcd with every change once.
	relist := &example.PodList{}
	if err := e.cacher.GetList(ctx, "/pods/", storage.ListOptions{ResourceVersion: "", Recursive: true, Predicate: storage.Everything}, relist); err != nil {
		t.Fatal(err)
	}
	relistRV := mustParseRV(t, relist.ResourceVersion)
	fcCheckList(ctx, t, e, "the re-list", relist, relistRV, cur)
	view := map[string]uint64{}
	for _, p := range relist.Items {
		view[p.Namespace+"/"+p.Name] = mustParseRV(t, p.ResourceVersion)
	}
	end := fcPodWrites(ctx, t, e, ns, "c")
	want = churnExpected(t, storage.Everything, churnHistory(ctx, t, e, relistRV, end))
	got = fcWatchPods(ctx, t, e, relistRV, len(want))
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after the re-list, a watch from rv=%d:\n got  %v\n want %v", relistRV, got, want)
	}
	for _, ev := range got {
		if ev.typ == watch.Deleted {
			delete(view, ev.key)
		} else {
			view[ev.key] = ev.rv
		}
	}
	etcdNow := map[string]uint64{}
	for k, p := range llStateAt(ctx, t, e, end) {
		etcdNow[k] = mustParseRV(t, p.ResourceVersion)
	}
	if fmt.Sprint(view) != fmt.Sprint(etcdNow) {
		t.Errorf("the client's view after the re-list and %d events differs from etcd:\n view %v\n etcd %v", len(got), view, etcdNow)
	}
	t.Logf("re-listed at rv=%d (%d pods), then %d events: the client's view equals etcd's %d pods at rv=%d; took %v",
		relistRV, len(relist.Items), len(got), len(etcdNow), end, time.Since(start).Round(time.Millisecond))
}

// fcPodWrites changes every pod of ns, deletes one and creates one, and
// returns the RV of the last change.
func fcPodWrites(ctx context.Context, t *testing.T, e *env, ns, round string) uint64 {
	t.Helper()
	list := &example.PodList{}
	if err := e.cacher.GetList(ctx, "/pods/"+ns, storage.ListOptions{ResourceVersion: "", Recursive: true, Predicate: storage.Everything}, list); err != nil {
		t.Fatal(err)
	}
	for i, p := range list.Items {
		if i == 0 {
			if err := e.cacher.Delete(ctx, bhPodKey(ns, p.Name), &example.Pod{}, nil, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		bhRelabelPod(ctx, t, e, ns, p.Name, round)
	}
	return bhRvOf(t, bhCreatePod(ctx, t, e, ns, "new-"+round))
}

// fcWatchPods reads n events of a watch from rv, then up to the next
// bookmark, and stops it. Nothing is written meanwhile, and a bookmark comes
// after everything sent before it: an event between the n-th and the
// bookmark is one more than etcd's history.
func fcWatchPods(ctx context.Context, t *testing.T, e *env, rv uint64, n int) []churnEvent {
	t.Helper()
	w, err := e.cacher.Watch(ctx, "/pods/", storage.ListOptions{ResourceVersion: strconv.FormatUint(rv, 10), Recursive: true, Predicate: bhEverything(true)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var out []churnEvent
	for len(out) < n {
		ev := bhNext(t, w, 10*time.Second)
		if ev.Type == watch.Bookmark {
			continue
		}
		p, ok := ev.Object.(*example.Pod)
		if !ok {
			t.Fatalf("watch from rv=%d: %s after %d events", rv, fcDescribe(ev.Event), len(out))
		}
		out = append(out, churnEvent{typ: ev.Type, key: p.Namespace + "/" + p.Name, rv: bhRvOf(t, p), state: podState(p)})
	}
	for {
		ev := bhNext(t, w, 10*time.Second)
		if ev.Type == watch.Bookmark {
			break
		}
		t.Errorf("watch from rv=%d: an event more than etcd's history: %s", rv, fcDescribe(ev.Event))
	}
	return out
}

// fcFirst is the first event of a watch, in brief.
type fcFirst struct {
	expired bool
	desc    string
}

// fcFirstEvent opens a watch of c from rv and reports its first event: a
// 410 must be the first and only one.
func fcFirstEvent(ctx context.Context, t *testing.T, c storage.Interface, rv uint64) fcFirst {
	t.Helper()
	w, err := c.Watch(ctx, "/pods/", storage.ListOptions{ResourceVersion: strconv.FormatUint(rv, 10), Recursive: true, Predicate: storage.Everything})
	if err != nil {
		t.Fatalf("watch from rv=%d refused: %v", rv, err)
	}
	defer w.Stop()
	ev := bhNext(t, w, 10*time.Second)
	out := fcFirst{desc: fcDescribe(ev.Event)}
	if ev.Type == watch.Error {
		err := apierrors.FromObject(ev.Object)
		out.expired = apierrors.IsResourceExpired(err)
		if out.expired {
			bhWaitClosed(t, w, 5*time.Second)
		}
	}
	return out
}

// fcWaitHeard waits until c refuses a list at exactly rv, which etcd
// compacted at compacted: the cache knows of the compaction.
func fcWaitHeard(ctx context.Context, t *testing.T, c storage.Interface, rv, compacted uint64) {
	t.Helper()
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		last = c.GetList(ctx, "/pods/", storage.ListOptions{
			ResourceVersion: strconv.FormatUint(rv, 10), ResourceVersionMatch: metav1.ResourceVersionMatchExact,
			Recursive: true, Predicate: storage.Everything,
		}, &example.PodList{})
		return apierrors.IsResourceExpired(last), nil
	}); err != nil {
		t.Fatalf("a list at exactly rv=%d still answered (%v) 20s after compacting at %d", rv, last, compacted)
	}
}

func fcDescribe(ev watch.Event) string {
	if s, ok := ev.Object.(*metav1.Status); ok {
		return fmt.Sprintf("%s %d %s %q", ev.Type, s.Code, s.Reason, s.Message)
	}
	return ssDescribe(ev)
}

// fcCheckList checks a list the cache served after the compaction at
// compacted: at or above it, and exactly etcd's state at the list's RV.
func fcCheckList(ctx context.Context, t *testing.T, e *env, what string, list *example.PodList, listRV, compacted uint64) {
	t.Helper()
	got := map[string]churnEvent{}
	for i := range list.Items {
		p := &list.Items[i]
		got[p.Namespace+"/"+p.Name] = churnEvent{typ: watch.Added, key: p.Namespace + "/" + p.Name, rv: bhRvOf(t, p), state: podState(p)}
	}
	at := max(listRV, compacted)
	want := llSelect(t, storage.Everything, llStateAt(ctx, t, e, at))
	if fmt.Sprint(llSorted(got)) != fmt.Sprint(llSorted(want)) {
		t.Errorf("%s at rv=%d (compaction at %d) is not etcd's state at rv=%d:\n got  %v\n etcd %v", what, listRV, compacted, at, llSorted(got), llSorted(want))
	}
}

// fcGate sits in an HTTP client's transport: closed, it ends the client's
// open watch streams (as a clean EOF, as when a connection drops) and holds
// its new requests until opened. It also notes which watch streams carried
// a 410.
type fcGate struct {
	mu      sync.Mutex
	closed  bool
	opened  chan struct{}
	streams map[*fcBody]bool
	held    []string // requests held while closed
	gone    []string // watches whose stream carried a 410
}

func newFcGate() *fcGate { return &fcGate{opened: make(chan struct{}), streams: map[*fcBody]bool{}} }

func (g *fcGate) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return ssRoundTripper(func(req *http.Request) (*http.Response, error) {
			g.mu.Lock()
			if g.closed {
				g.held = append(g.held, req.URL.RequestURI())
				opened := g.opened
				g.mu.Unlock()
				select {
				case <-opened:
				case <-req.Context().Done():
					return nil, req.Context().Err()
				}
			} else {
				g.mu.Unlock()
			}
			resp, err := rt.RoundTrip(req)
			if err != nil || !ssIsWatch(ssRequest{Method: req.Method, URL: req.URL}) {
				return resp, err
			}
			b := &fcBody{ReadCloser: resp.Body, g: g, uri: req.URL.RequestURI(), cut: make(chan struct{})}
			g.mu.Lock()
			g.streams[b] = true
			g.mu.Unlock()
			resp.Body = b
			return resp, nil
		})
	})
	return cfg
}

func (g *fcGate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	g.opened = make(chan struct{})
	for b := range g.streams {
		b.once.Do(func() { close(b.cut) })
		_ = b.ReadCloser.Close()
	}
}

func (g *fcGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		g.closed = false
		close(g.opened)
	}
}

func (g *fcGate) snapshot() (held, gone []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.held...), append([]string(nil), g.gone...)
}

// fcBody is a watch response body the gate can cut.
type fcBody struct {
	io.ReadCloser
	g    *fcGate
	uri  string
	cut  chan struct{}
	once sync.Once
	tail []byte // the reader's, for a marker split across reads
	gone bool
}

var fcGoneMarker = []byte(`"code":410`)

func (b *fcBody) Read(p []byte) (int, error) {
	select {
	case <-b.cut:
		return 0, io.EOF
	default:
	}
	n, err := b.ReadCloser.Read(p)
	select {
	case <-b.cut:
		return 0, io.EOF
	default:
	}
	if !b.gone && n > 0 {
		buf := append(b.tail, p[:n]...)
		if bytes.Contains(buf, fcGoneMarker) {
			b.gone = true
			b.g.mu.Lock()
			b.g.gone = append(b.g.gone, b.uri)
			b.g.mu.Unlock()
		}
		b.tail = append(b.tail[:0], buf[max(0, len(buf)-len(fcGoneMarker)):]...)
	}
	return n, err
}

func (b *fcBody) Close() error {
	b.g.mu.Lock()
	delete(b.g.streams, b)
	b.g.mu.Unlock()
	return b.ReadCloser.Close()
}

// fcHTTP: the same over HTTP against the sample apiserver, on an etcd the
// test compacts: a raw watch, a client-go shared informer, and lists.
func fcHTTP(t *testing.T, decorator string) {
	start := time.Now()
	etcd := etcdtest.Start(t)
	s := startSampleServer(t, "--etcd-servers="+etcd.Endpoints()[0], "--watch-cache-decorator="+decorator,
		"--watch-cache-bookmark-frequency=1s", "--watch-cache-bookmark-pre-deadline-offset=500ms",
		"--watch-cache-events-history-window=5m")
	ec := etcd.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// The raw client and the informer each have a namespace; every change
	// is made in both (see fault_etcd_restart_test.go for why).
	for _, ns := range []string{feRawNS, feInfNS} {
		ssCreateWidgets(ctx, t, s.Client, ns, "pre", 6)
	}

	// The informer, whose transport the test can cut.
	gate := newFcGate()
	rec := &feRecorder{}
	iclient, err := clientset.NewForConfig(rec.wrap(gate.wrap(s.Admin)))
	if err != nil {
		t.Fatal(err)
	}
	// Open again before the informer stops (at the test's end).
	defer gate.open()
	informer := ssStartInformer(ctx, t, iclient, feInfNS)
	wr := &feWriter{c: s.Client}
	wr.resize(ctx, t, "pre-0", 5)
	fcConverge(ctx, t, ec, informer, "before the fault")
	time.Sleep(1500 * time.Millisecond) // a watch that ends younger than 1s makes a reflector re-list

	// The raw client holds the RV of its list.
	list, err := s.Client.DemoV1alpha1().Widgets(feRawNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held := list.ResourceVersion

	// The informer's connection drops; its watch from the RV it holds waits.
	gate.close()
	var heldWatch string
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		if reqs, _ := gate.snapshot(); len(reqs) > 0 {
			heldWatch = reqs[0]
		}
		return heldWatch != "", nil
	}); err != nil {
		t.Fatalf("the informer did not try to resume its watch within 10s of the drop: %v", err)
	}
	u, err := url.Parse(heldWatch)
	if err != nil {
		t.Fatal(err)
	}
	infRV := u.Query().Get("resourceVersion")
	if u.Query().Get("watch") == "" || infRV == "" || u.Query().Get("sendInitialEvents") != "" {
		t.Fatalf("the informer's first request after the drop is %s, want a watch resuming from an RV", heldWatch)
	}
	t.Logf("raw client holds rv=%s; the informer resumes with %s", held, heldWatch)

	// Writes go on while both are away.
	from := len(wr.written)
	for i := range 6 {
		if i == 5 {
			wr.delete(ctx, t, fmt.Sprintf("pre-%d", i))
			continue
		}
		wr.resize(ctx, t, fmt.Sprintf("pre-%d", i), int32(10+i))
	}
	wr.create(ctx, t, "mid-0")
	wr.resize(ctx, t, "pre-1", 20)
	missed := wr.written[from:]

	// Before the compaction the raw client resumes from the held RV.
	path := ssWidgetsPath(feRawNS)
	q := url.Values{"watch": {"1"}, "resourceVersion": {held}}
	first, got := fcHTTPWatch(ctx, t, s, path, q, len(missed))
	if first != "" || fmt.Sprint(got) != fmt.Sprint(missed) {
		t.Fatalf("before the compaction, a watch from rv=%s: error %q, got %v, want %v", held, first, got, missed)
	}

	// The compaction, kube-apiserver's way, at etcd's current revision.
	now, err := ec.Get(ctx, "compact-probe")
	if err != nil {
		t.Fatal(err)
	}
	compactRev := now.Header.Revision
	fcCompact(ctx, t, ec, compactRev)
	compactedAt := time.Now()
	if _, err := ec.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithRev(int64(mustParseRV(t, held)))); err == nil {
		t.Fatalf("etcd still serves rv=%s after compacting at %d", held, compactRev)
	}

	// Once the server knows of the compaction (a list at exactly the held
	// RV gets etcd's 410), the raw client resumes from the held RV: served
	// from the history, exactly the changes, as upstream's cache serves it.
	var refused error
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, refused = s.Client.DemoV1alpha1().Widgets(feRawNS).List(ctx, metav1.ListOptions{ResourceVersion: held, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
		return apierrors.IsResourceExpired(refused), nil
	}); err != nil {
		t.Fatalf("a list at exactly rv=%s still answered (%v) 30s after the compaction at %d", held, refused, compactRev)
	}
	heard := time.Since(compactedAt)
	first, got = fcHTTPWatch(ctx, t, s, path, q, len(missed))
	if first != "" || fmt.Sprint(got) != fmt.Sprint(missed) {
		t.Fatalf("after the compaction, a watch from rv=%s: error %q, got %v, want the changes %v", held, first, got, missed)
	}
	t.Logf("compacted at %d; %v later an exact list at rv=%s got 410, and a watch from it was served the %d changes", compactRev, heard.Round(time.Millisecond), held, len(got))

	// Nothing stale: lists at RV "0" and "" are etcd's state at their RV, at
	// or above the compaction.
	for _, rv := range []string{"0", ""} {
		before, err := ec.Get(ctx, "compact-probe")
		if err != nil {
			t.Fatal(err)
		}
		l, err := s.Client.DemoV1alpha1().Widgets(feRawNS).List(ctx, metav1.ListOptions{ResourceVersion: rv})
		if err != nil {
			t.Fatalf("list at rv=%q: %v", rv, err)
		}
		listRV := int64(mustParseRV(t, l.ResourceVersion))
		if rv == "" && listRV < before.Header.Revision {
			t.Errorf("consistent list at rv=%d, below etcd's revision %d before it was asked", listRV, before.Header.Revision)
		}
		got := map[string]string{}
		for _, w := range l.Items {
			got[w.Name] = w.ResourceVersion
		}
		at := max(listRV, compactRev)
		want, err := fcEtcdWidgetsAt(ctx, ec, feRawNS, at)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("list at rv=%q served at rv=%d (compaction at %d) is not etcd's state at rv=%d:\n got  %v\n etcd %v", rv, listRV, compactRev, at, got, want)
		}
		t.Logf("list at rv=%q after the compaction: %d widgets at rv=%d, equal to etcd's at rv=%d", rv, len(got), listRV, at)
	}

	// The informer comes back: its watch resumes from the compacted RV
	// without a 410 or a re-list, and converges; more writes reach it.
	opened := time.Now()
	gate.open()
	converged := fcConverge(ctx, t, ec, informer, "after the compaction")
	wr.create(ctx, t, "post-0")
	wr.delete(ctx, t, "pre-0")
	wr.resize(ctx, t, "pre-2", 30)
	fcConverge(ctx, t, ec, informer, "after more writes")
	_, goneWatches := gate.snapshot()
	reqs := rec.since(opened, feClock{t0: opened})
	t.Logf("informer after the gate opened: converged in %v; requests %v", converged.Round(time.Millisecond), reqs)
	if len(goneWatches) > 0 {
		t.Errorf("watches of the informer carried a 410 after the compaction: %v", goneWatches)
	}
	for _, r := range reqs {
		if strings.Contains(r, " GET ") && (!strings.Contains(r, "watch=") || strings.Contains(r, "sendInitialEvents=true")) {
			t.Errorf("the informer re-listed after the compaction: %s (requests %v)", r, reqs)
		}
	}
	t.Logf("took %v", time.Since(start).Round(time.Millisecond))
}

// fcHTTPWatch opens a watch that the server ends after 2s and reads it to
// its end; it returns the first error event described, or the changes as a
// writer records them. Nothing is written meanwhile, so the changes are all
// sent at once and the stream's end comes after them: an event past the
// n-th is one too many. (The end is the marker rather than a bookmark:
// upstream's cache sends its bookmarks on a schedule the test cannot set.)
func fcHTTPWatch(ctx context.Context, t *testing.T, s *sampleServer, path string, q url.Values, n int) (string, []feWrite) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	q = maps.Clone(q)
	q.Set("timeoutSeconds", "2")
	w := ssWatch(wctx, t, s, path, q)
	defer w.Stop()
	var got []feWrite
	for {
		select {
		case ev, ok := <-w.ResultChan():
			switch {
			case !ok:
				return "", got
			case ev.Type == watch.Error:
				return fcDescribe(ev), got
			case ev.Type == watch.Bookmark:
				continue
			}
			m := ssMeta(t, ev.Object)
			fw := feWrite{ev.Type, m.GetName(), m.GetResourceVersion()}
			if ev.Type == watch.Deleted {
				fw.rv = ""
			}
			if len(got) == n {
				t.Errorf("watch from %s: more events than the %d changes made: %v", q.Get("resourceVersion"), n, fw)
			}
			got = append(got, fw)
		case <-wctx.Done():
			t.Fatalf("watch from %s with a 2s timeout still open after 15s (%d events)", q.Get("resourceVersion"), len(got))
		}
	}
}

// fcCompact compacts etcd at rev as kube-apiserver's compactor does: the
// revision is recorded under compact_rev_key (with a compare-and-swap on
// its version), then etcd compacts.
func fcCompact(ctx context.Context, t *testing.T, c *clientv3.Client, rev int64) {
	t.Helper()
	var version int64
	for range 3 {
		v, _, compacted, err := etcd3.Compact(ctx, c, version, rev)
		if err != nil {
			t.Fatalf("compacting at %d: %v", rev, err)
		}
		if compacted == rev {
			return
		}
		version = v // another compactor moved the key: retry with its version
	}
	t.Fatalf("could not compact at %d", rev)
}

// fcEtcdWidgetsAt is etcd's view of the widgets in ns at rev: name -> mod
// revision.
func fcEtcdWidgetsAt(ctx context.Context, c *clientv3.Client, ns string, rev int64) (map[string]string, error) {
	resp, err := c.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithRev(rev))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	marker := "/widgets/" + ns + "/"
	for _, kv := range resp.Kvs {
		k := string(kv.Key)
		if i := strings.LastIndex(k, marker); i >= 0 {
			out[k[i+len(marker):]] = strconv.FormatInt(kv.ModRevision, 10)
		}
	}
	return out, nil
}

// fcConverge waits up to 30s for the informer's store to equal etcd's
// widgets in its namespace (names and RVs) and returns how long it took.
func fcConverge(ctx context.Context, t *testing.T, ec *clientv3.Client, informer cache.SharedIndexInformer, when string) time.Duration {
	t.Helper()
	start := time.Now()
	var want, have map[string]string
	var err error
	if perr := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		gctx, gcancel := context.WithTimeout(ctx, 5*time.Second)
		want, err = feEtcdWidgets(gctx, ec, feInfNS)
		gcancel()
		have = feStore(informer)
		return err == nil && fmt.Sprint(have) == fmt.Sprint(want), nil
	}); perr != nil {
		t.Fatalf("%s: informer store never converged on etcd within 30s (%v; etcd err %v):\n store %v\n etcd  %v", when, perr, err, have, want)
	}
	return time.Since(start)
}
