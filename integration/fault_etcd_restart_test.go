package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/watchkeeper/watchkeeper/internal/etcdtest"
	"github.com/watchkeeper/watchkeeper/internal/testchild"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/v1alpha1"
	clientset "github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/generated/clientset/versioned"
)

// The first fault of issue 6: etcd stopped and restarted while watches are
// open. The test logs, with times relative to the stop, what /readyz,
// cache-served reads and watches, an open raw watch and a shared informer do
// during the outage and after the restart, and asserts: during the outage
// the watch cache goes not ready (with a 3s storage silence timeout: etcd's
// client retries a dead stream without a word, so silence is the signal),
// so /readyz's watch-caches check fails and an RV "0" list gets 429 with
// Retry-After instead of a stale 200; once etcd is back /readyz recovers,
// the open raw watch either carries on without loss or ends, and the
// informer converges on etcd.
//
// The raw watch, the informer and the outage probes each use a namespace of
// their own, and every change is made in the first two alike. Two HTTP
// watches that receive the same cached object encode it concurrently, and
// the versioning codec sets and restores the GVK on the object it encodes:
// with the object shared by the cache (cacher/watcher.go convert,
// initialAdded) that is a data race under -race. Upstream's cacher hands
// watchers a cachingObject, which encodes a copy.
//
// Helpers here carry an fe prefix; they reuse sampleserver_watch_test.go's
// ssWidget, ssWidgetsPath, ssCreateWidgets, ssStream, ssDescribe and
// ssRoundTripper, and metrics_test.go's metricValue.

const (
	feRawNS   = "fault-raw"   // the raw watch's namespace
	feInfNS   = "fault-inf"   // the informer's namespace
	feProbeNS = "fault-probe" // the outage probes' namespace
	// feOutage is how long etcd stays down once Stop has returned (Stop
	// itself takes a while: etcd waits for open gRPC streams, up to its
	// request timeout, before cutting them).
	feOutage       = 10 * time.Second
	feRecoverBound = 30 * time.Second
)

// feClock prints times relative to the moment etcd was stopped.
type feClock struct{ t0 time.Time }

func (c feClock) at(tm time.Time) string {
	return fmt.Sprintf("%+.2fs", tm.Sub(c.t0).Seconds())
}

func (c feClock) now() string { return c.at(time.Now()) }

// feHTTP sends the admin's requests with a per-request timeout and never
// fails the test: an error is an observation.
type feHTTP struct {
	base   string
	client *http.Client
}

func newFeHTTP(t *testing.T, s *sampleServer) *feHTTP {
	t.Helper()
	tr, err := rest.TransportFor(s.Admin)
	if err != nil {
		t.Fatal(err)
	}
	return &feHTTP{base: s.URL, client: &http.Client{Transport: tr}}
}

func (h *feHTTP) do(ctx context.Context, path string, query url.Values) (*http.Response, error) {
	u := h.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	return h.client.Do(req)
}

// feAnswer is one request's outcome, for the log.
type feAnswer struct {
	code       int
	retryAfter string
	body       string
	err        error
	took       time.Duration
}

func (a feAnswer) String() string {
	if a.err != nil {
		return fmt.Sprintf("error after %v: %v", a.took.Round(time.Millisecond), a.err)
	}
	s := fmt.Sprintf("%d in %v", a.code, a.took.Round(time.Millisecond))
	if a.retryAfter != "" {
		s += " Retry-After=" + a.retryAfter
	}
	return s
}

func (h *feHTTP) get(path string, query url.Values, timeout time.Duration) feAnswer {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	resp, err := h.do(ctx, path, query)
	if err != nil {
		return feAnswer{err: err, took: time.Since(start)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return feAnswer{code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), body: string(body), err: err, took: time.Since(start)}
}

// readyz is /readyz?verbose, reduced to its failing checks and the
// watch-caches line.
func (h *feHTTP) readyz(timeout time.Duration) (feAnswer, string) {
	a := h.get("/readyz", url.Values{"verbose": {"1"}}, timeout)
	var lines []string
	for _, l := range strings.Split(a.body, "\n") {
		if strings.HasPrefix(l, "[-]") || strings.Contains(l, "watch-caches") || strings.HasPrefix(l, "readyz check") {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	return a, strings.Join(lines, " | ")
}

// feListSummary is what a list answer says, in brief.
func feListSummary(body string) string {
	var l struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Items   []json.RawMessage `json:"items"`
		Kind    string            `json:"kind"`
		Reason  string            `json:"reason"`
		Message string            `json:"message"`
	}
	if err := json.Unmarshal([]byte(body), &l); err != nil {
		return fmt.Sprintf("undecodable body %.80q", body)
	}
	if l.Kind == "Status" {
		return fmt.Sprintf("Status %s %q", l.Reason, l.Message)
	}
	return fmt.Sprintf("%d items at RV %s", len(l.Items), l.Metadata.ResourceVersion)
}

// watchProbe opens a watch, reads it for up to d, and describes what came.
func (h *feHTTP) watchProbe(path string, query url.Values, d time.Duration) string {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	resp, err := h.do(ctx, path, query)
	if err != nil {
		return fmt.Sprintf("error after %v: %v", time.Since(start).Round(time.Millisecond), err)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		a := feAnswer{code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), took: time.Since(start)}
		return fmt.Sprintf("%v: %s", a, feListSummary(string(body)))
	}
	headersAfter := time.Since(start)
	w := ssStream(resp)
	defer w.Stop()
	var got []string
	closed := false
	for !closed {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				closed = true
				break
			}
			got = append(got, fmt.Sprintf("%s@+%v", ssDescribe(ev), time.Since(start).Round(time.Millisecond)))
		case <-ctx.Done():
			closed = true
		}
	}
	if len(got) > 4 {
		got = append(got[:2], fmt.Sprintf("... %d more ...", len(got)-3), got[len(got)-1])
	}
	return fmt.Sprintf("200 (headers in %v), read for %v: %d events %v", headersAfter.Round(time.Millisecond), d, len(got), got)
}

// feEvent is one event a watcher received.
type feEvent struct {
	typ  watch.EventType
	name string
	rv   string
	at   time.Time
	desc string
}

// feFollower reads a watch into a log until it closes.
type feFollower struct {
	mu       sync.Mutex
	events   []feEvent
	closedAt time.Time
	done     chan struct{}
	progress chan struct{} // closed and replaced on every event
}

func feFollow(w watch.Interface) *feFollower {
	f := &feFollower{done: make(chan struct{}), progress: make(chan struct{})}
	go func() {
		defer close(f.done)
		for ev := range w.ResultChan() {
			e := feEvent{typ: ev.Type, at: time.Now(), desc: ssDescribe(ev)}
			if m, ok := ev.Object.(metav1.Object); ok {
				e.name, e.rv = m.GetName(), m.GetResourceVersion()
			}
			f.mu.Lock()
			f.events = append(f.events, e)
			close(f.progress)
			f.progress = make(chan struct{})
			f.mu.Unlock()
		}
		f.mu.Lock()
		f.closedAt = time.Now()
		close(f.progress)
		f.progress = make(chan struct{})
		f.mu.Unlock()
	}()
	return f
}

func (f *feFollower) snapshot() ([]feEvent, time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]feEvent(nil), f.events...), f.closedAt
}

// waitFor blocks until cond holds on the events, the watch closes or d
// passes, and reports whether cond held.
func (f *feFollower) waitFor(d time.Duration, cond func([]feEvent) bool) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		ok, closed, progress := cond(f.events), !f.closedAt.IsZero(), f.progress
		f.mu.Unlock()
		if ok {
			return true
		}
		if closed {
			return false
		}
		select {
		case <-progress:
		case <-deadline.C:
			return false
		}
	}
}

// feWrite is one write the test made in feNamespace, as a watcher must see
// it. A deletion's RV is unknown to the client, so it is left empty.
type feWrite struct {
	typ  watch.EventType
	name string
	rv   string
}

func (w feWrite) String() string { return fmt.Sprintf("%s %s@%s", w.typ, w.name, w.rv) }

// feRecorder records the informer's requests with their time and status.
type feRecorder struct {
	mu   sync.Mutex
	reqs []string
	at   []time.Time
}

func (r *feRecorder) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return ssRoundTripper(func(req *http.Request) (*http.Response, error) {
			start := time.Now()
			resp, err := rt.RoundTrip(req)
			outcome := ""
			if err != nil {
				outcome = "error: " + err.Error()
			} else {
				outcome = fmt.Sprint(resp.StatusCode)
				if ra := resp.Header.Get("Retry-After"); ra != "" {
					outcome += " Retry-After=" + ra
				}
			}
			r.mu.Lock()
			r.reqs = append(r.reqs, fmt.Sprintf("%s %s -> %s", req.Method, req.URL.RequestURI(), outcome))
			r.at = append(r.at, start)
			r.mu.Unlock()
			return resp, err
		})
	})
	return cfg
}

func (r *feRecorder) since(t0 time.Time, c feClock) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for i, at := range r.at {
		if !at.Before(t0) {
			out = append(out, c.at(at)+" "+r.reqs[i])
		}
	}
	return out
}

// feEtcdWidgets is etcd's own view of the widgets in ns: name -> mod revision.
func feEtcdWidgets(ctx context.Context, c *clientv3.Client, ns string) (map[string]string, error) {
	resp, err := c.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	marker := "/widgets/" + ns + "/"
	for _, kv := range resp.Kvs {
		k := string(kv.Key)
		if i := strings.LastIndex(k, marker); i >= 0 {
			out[k[i+len(marker):]] = fmt.Sprint(kv.ModRevision)
		}
	}
	return out, nil
}

func feStore(inf cache.SharedIndexInformer) map[string]string {
	out := map[string]string{}
	for _, obj := range inf.GetStore().List() {
		w := obj.(*v1alpha1.Widget)
		out[w.Name] = w.ResourceVersion
	}
	return out
}

// feWriter makes every change in the raw watch's and the informer's
// namespaces alike, and records the raw watch's share.
type feWriter struct {
	c       clientset.Interface
	written []feWrite
}

func (w *feWriter) each(t *testing.T, f func(ns string) (*v1alpha1.Widget, error), typ watch.EventType, name string) {
	t.Helper()
	for _, ns := range []string{feRawNS, feInfNS} {
		obj, err := f(ns)
		if err != nil {
			t.Fatalf("%s %s/%s: %v", typ, ns, name, err)
		}
		if ns == feRawNS {
			rv := ""
			if obj != nil {
				rv = obj.ResourceVersion
			}
			w.written = append(w.written, feWrite{typ, name, rv})
		}
	}
}

func (w *feWriter) create(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	w.each(t, func(ns string) (*v1alpha1.Widget, error) {
		return w.c.DemoV1alpha1().Widgets(ns).Create(ctx, ssWidget(ns, name), metav1.CreateOptions{})
	}, watch.Added, name)
}

func (w *feWriter) resize(ctx context.Context, t *testing.T, name string, size int32) {
	t.Helper()
	w.each(t, func(ns string) (*v1alpha1.Widget, error) {
		obj, err := w.c.DemoV1alpha1().Widgets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		obj.Spec.Size = size
		return w.c.DemoV1alpha1().Widgets(ns).Update(ctx, obj, metav1.UpdateOptions{})
	}, watch.Modified, name)
}

func (w *feWriter) delete(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	w.each(t, func(ns string) (*v1alpha1.Widget, error) {
		return nil, w.c.DemoV1alpha1().Widgets(ns).Delete(ctx, name, metav1.DeleteOptions{})
	}, watch.Deleted, name)
}

func TestFaultEtcdRestart(t *testing.T) {
	t.Parallel() // in a process of its own: it reads the process-wide metrics
	if !testchild.Isolate(t) {
		return
	}
	etcd := etcdtest.Start(t)
	s := startSampleServer(t, "--etcd-servers="+etcd.Endpoints()[0],
		"--watch-cache-bookmark-frequency=1s", "--watch-cache-bookmark-pre-deadline-offset=500ms",
		"--watch-cache-storage-silence-timeout=3s")
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	h := newFeHTTP(t, s)
	gr := map[string]string{"group": "demo.watchkeeper.io", "resource": "widgets"}

	// The state before the fault.
	for _, ns := range []string{feRawNS, feInfNS, feProbeNS} {
		ssCreateWidgets(ctx, t, s.Client, ns, "pre", 8)
	}
	list, err := s.Client.DemoV1alpha1().Widgets(feRawNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	startRV := list.ResourceVersion

	// (a) A raw watch from the current RV, with bookmarks.
	raw, err := s.Client.DemoV1alpha1().Widgets(feRawNS).Watch(ctx, metav1.ListOptions{ResourceVersion: startRV, AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Stop()
	follower := feFollow(raw)

	// (b) A shared informer, with client-go's defaults (WatchList on).
	rec := &feRecorder{}
	iclient, err := clientset.NewForConfig(rec.wrap(s.Admin))
	if err != nil {
		t.Fatal(err)
	}
	type ievent struct {
		at   time.Time
		desc string
	}
	var imu sync.Mutex
	var ievents []ievent
	note := func(typ string, obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if w, ok := obj.(*v1alpha1.Widget); ok {
			imu.Lock()
			ievents = append(ievents, ievent{time.Now(), fmt.Sprintf("%s %s@%s", typ, w.Name, w.ResourceVersion)})
			imu.Unlock()
		}
	}
	informer := ssStartInformer(ctx, t, iclient, feInfNS, cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { note("add", o) },
		UpdateFunc: func(_, o any) { note("update", o) },
		DeleteFunc: func(o any) { note("delete", o) },
	})

	// A few changes before the fault, which the raw watch must see.
	wr := &feWriter{c: s.Client}
	wr.resize(ctx, t, "pre-0", 5)
	wr.delete(ctx, t, "pre-1")
	if !follower.waitFor(10*time.Second, func(evs []feEvent) bool { return feNonBookmarks(evs) >= len(wr.written) }) {
		t.Fatalf("the raw watch did not deliver the changes made before the fault")
	}
	probeList, err := s.Client.DemoV1alpha1().Widgets(feProbeNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lastRV := probeList.ResourceVersion
	initsBefore, _ := metricValue(t, "apiserver_watch_cache_initializations_total", gr)
	initErrsBefore, _ := metricValue(t, "apiserver_watch_cache_initialization_errors_total", gr)
	t.Logf("before the fault: raw watch from RV %s, informer synced (%d widgets), etcd at RV %s; cache initializations %v, errors %v",
		startRV, len(informer.GetStore().List()), lastRV, initsBefore, initErrsBefore)

	// The outage. Stop runs in the background: it returns only once etcd
	// has cut its open streams, and the probes watch that phase too.
	clk := feClock{t0: time.Now()}
	stopped := make(chan time.Time, 1)
	go func() {
		etcd.Stop()
		stopped <- time.Now()
	}()
	done := make(chan struct{})
	var wg sync.WaitGroup
	repeat := func(name string, every time.Duration, f func() string) {
		wg.Go(func() {
			for {
				start := time.Now()
				out := f()
				t.Logf("[%s] outage %s: %s", clk.at(start), name, out)
				wait := time.NewTimer(max(every-time.Since(start), 0))
				select {
				case <-done:
				case <-wait.C:
				}
				wait.Stop()
				select {
				case <-done:
					return
				default:
				}
			}
		})
	}
	once := func(name string, f func() string) {
		wg.Go(func() {
			start := time.Now()
			out := f()
			t.Logf("[%s] outage %s: %s", clk.at(start), name, out)
		})
	}
	probePath := ssWidgetsPath(feProbeNS)
	var seenMu sync.Mutex
	var cacheNotReady, list429 bool
	repeat("readyz", time.Second, func() string {
		a, lines := h.readyz(5 * time.Second)
		if strings.Contains(lines, "[-]watch-caches") {
			seenMu.Lock()
			cacheNotReady = true
			seenMu.Unlock()
		}
		return fmt.Sprintf("%v: %s", a, lines)
	})
	repeat("list rv=0", time.Second, func() string {
		a := h.get(probePath, url.Values{"resourceVersion": {"0"}}, 5*time.Second)
		if a.err != nil {
			return a.String()
		}
		if a.code == http.StatusTooManyRequests && a.retryAfter != "" {
			seenMu.Lock()
			list429 = true
			seenMu.Unlock()
		}
		return fmt.Sprintf("%v: %s", a, feListSummary(a.body))
	})
	repeat("watch rv="+lastRV, 2*time.Second, func() string {
		q := url.Values{"watch": {"1"}, "resourceVersion": {lastRV}, "allowWatchBookmarks": {"true"}}
		return h.watchProbe(probePath, q, 1500*time.Millisecond)
	})
	stopReturned := <-stopped
	t.Logf("[%s] etcd.Stop returned: etcd is down", clk.at(stopReturned))
	long := feOutage - time.Second
	once(fmt.Sprintf("list rv=\"\" (consistent), client timeout %v", long), func() string {
		a := h.get(probePath, nil, long)
		if a.err != nil {
			return a.String()
		}
		return fmt.Sprintf("%v: %s", a, feListSummary(a.body))
	})
	once(fmt.Sprintf("watchlist (rv unset, sendInitialEvents), client timeout %v", long), func() string {
		q := url.Values{"watch": {"1"}, "sendInitialEvents": {"true"}, "allowWatchBookmarks": {"true"},
			"resourceVersionMatch": {string(metav1.ResourceVersionMatchNotOlderThan)}}
		return h.watchProbe(probePath, q, long)
	})
	once(fmt.Sprintf("create, client timeout %v", long), func() string {
		wctx, wcancel := context.WithTimeout(ctx, long)
		defer wcancel()
		start := time.Now()
		_, err := s.Client.DemoV1alpha1().Widgets(feProbeNS).Create(wctx, ssWidget(feProbeNS, "during-outage"), metav1.CreateOptions{})
		return fmt.Sprintf("err=%v after %v", err, time.Since(start).Round(time.Millisecond))
	})
	time.Sleep(time.Until(stopReturned.Add(feOutage)))
	close(done)
	wg.Wait()
	if !cacheNotReady {
		t.Errorf("/readyz's watch-caches check never failed during a %v outage", feOutage)
	}
	if !list429 {
		t.Errorf("no RV \"0\" list got 429 with Retry-After during a %v outage: the cache served a stale state", feOutage)
	}

	evs, closedAt := follower.snapshot()
	var bookmarks []string
	var others []string
	var prev time.Time
	var maxGap time.Duration
	for _, e := range evs {
		if e.at.Before(clk.t0) {
			continue
		}
		if e.typ != watch.Bookmark {
			others = append(others, clk.at(e.at)+" "+e.desc)
			continue
		}
		bookmarks = append(bookmarks, clk.at(e.at)+"@"+e.rv)
		if !prev.IsZero() {
			maxGap = max(maxGap, e.at.Sub(prev))
		}
		prev = e.at
	}
	t.Logf("[%s] raw watch during the outage: closed %v; %d bookmarks (largest gap %v) %v; other events %v",
		clk.now(), !closedAt.IsZero(), len(bookmarks), maxGap.Round(time.Millisecond), bookmarks, others)
	t.Logf("[%s] informer requests since the stop: %v", clk.now(), rec.since(clk.t0, clk))

	// The restart.
	restartAt := time.Now()
	etcd.Restart()
	t.Logf("[%s] etcd restarted (Restart returned after %v)", clk.now(), time.Since(restartAt).Round(time.Millisecond))

	readyAt := time.Time{}
	var lastReadyz string
	attempts := 0
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, feRecoverBound, true, func(context.Context) (bool, error) {
		attempts++
		a, lines := h.readyz(3 * time.Second)
		if a.err == nil && a.code == http.StatusOK {
			readyAt = time.Now()
			return true, nil
		}
		if line := fmt.Sprintf("%v: %s", a, lines); line != lastReadyz {
			t.Logf("[%s] after the restart, readyz: %s", clk.now(), line)
			lastReadyz = line
		}
		return false, nil
	}); err != nil {
		t.Fatalf("/readyz not ok %v after the restart (%v); last: %s", feRecoverBound, err, lastReadyz)
	}
	t.Logf("[%s] /readyz ok, %v after Restart returned (attempt %d, 3s client timeout each)", clk.at(readyAt), readyAt.Sub(restartAt).Round(time.Millisecond), attempts)

	// The first write after the restart, retried until etcd takes it.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, feRecoverBound, true, func(ctx context.Context) (bool, error) {
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		defer wcancel()
		start := time.Now()
		w, err := s.Client.DemoV1alpha1().Widgets(feProbeNS).Create(wctx, ssWidget(feProbeNS, "after-restart"), metav1.CreateOptions{})
		if err == nil {
			t.Logf("[%s] first write after the restart accepted: %s/%s@%s", clk.now(), feProbeNS, w.Name, w.ResourceVersion)
			return true, nil
		}
		t.Logf("[%s] after the restart, create: %v after %v", clk.at(start), err, time.Since(start).Round(time.Millisecond))
		return false, nil
	}); err != nil {
		t.Fatalf("no write accepted %v after the restart: %v", feRecoverBound, err)
	}
	postFrom := len(wr.written)
	firstChange := time.Now()
	for i := range 5 {
		wr.create(ctx, t, fmt.Sprintf("post-%d", i))
	}
	wr.resize(ctx, t, "pre-0", 9)
	wr.delete(ctx, t, "pre-2")
	written := wr.written
	wroteAll := time.Now()
	t.Logf("[%s] made %d changes after the restart: %v", clk.now(), len(written)-postFrom, written[postFrom:])

	// (a) The raw watch: every change, in order, once; or closed.
	complete := follower.waitFor(20*time.Second, func(evs []feEvent) bool { return feNonBookmarks(evs) >= len(written) })
	evs, closedAt = follower.snapshot()
	var got []feWrite
	var firstPost time.Time
	var bookmarksAfter []string
	for _, e := range evs {
		if e.typ == watch.Bookmark {
			if e.at.After(restartAt) {
				bookmarksAfter = append(bookmarksAfter, clk.at(e.at)+"@"+e.rv)
			}
			continue
		}
		fw := feWrite{e.typ, e.name, e.rv}
		if e.typ == watch.Deleted {
			fw.rv = "" // a deletion's RV is unknown to the writer
		}
		if len(got) == postFrom {
			firstPost = e.at
		}
		got = append(got, fw)
	}
	t.Logf("[%s] raw watch: %d events in all, complete %v, closed %v; bookmarks since the restart %v",
		clk.now(), len(got), complete, !closedAt.IsZero(), bookmarksAfter)
	if !firstPost.IsZero() {
		t.Logf("raw watch: first event after the restart at %s, %v after Restart returned, %v after the first change was made",
			clk.at(firstPost), firstPost.Sub(restartAt).Round(time.Millisecond), firstPost.Sub(firstChange).Round(time.Millisecond))
	}
	if !closedAt.IsZero() {
		t.Logf("raw watch closed at %s; its last events: %v", clk.at(closedAt), feTail(evs, 3))
	}
	n := min(len(got), len(written))
	if fmt.Sprint(got[:n]) != fmt.Sprint(written[:n]) || len(got) > len(written) {
		t.Errorf("raw watch from RV %s saw other events than the changes made (loss, duplicate or reordering):\n got     %v\n written %v", startRV, got, written)
	}
	switch {
	case len(got) == len(written):
		t.Logf("raw watch carried on across the outage without loss: %d of %d changes, in order, once", len(got), len(written))
	case !closedAt.IsZero():
		t.Logf("raw watch ended after %d of %d changes; a client resumes or re-lists", len(got), len(written))
	default:
		t.Errorf("raw watch still open but saw %d of %d changes 20s after the last one:\n got     %v\n written %v", len(got), len(written), got, written)
	}

	// (b) The informer converges on etcd's own state.
	ec := etcd.Client()
	var want, have map[string]string
	converged := time.Time{}
	if perr := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, feRecoverBound, true, func(ctx context.Context) (bool, error) {
		gctx, gcancel := context.WithTimeout(ctx, 5*time.Second)
		want, err = feEtcdWidgets(gctx, ec, feInfNS)
		gcancel()
		have = feStore(informer)
		return err == nil && fmt.Sprint(have) == fmt.Sprint(want), nil
	}); perr != nil {
		t.Errorf("informer store never converged on etcd within %v of the last change (%v; etcd err %v):\n store %v\n etcd  %v", feRecoverBound, perr, err, have, want)
	} else {
		converged = time.Now()
		t.Logf("[%s] informer store equals etcd (%d widgets, names and RVs), %v after the last change", clk.at(converged), len(want), converged.Sub(wroteAll).Round(time.Millisecond))
	}
	if l, err := s.Client.DemoV1alpha1().Widgets(feInfNS).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("consistent LIST after the restart: %v", err)
	} else {
		fromServer := map[string]string{}
		for _, w := range l.Items {
			fromServer[w.Name] = w.ResourceVersion
		}
		if fmt.Sprint(fromServer) != fmt.Sprint(want) {
			t.Errorf("consistent LIST from the server differs from etcd:\n list %v\n etcd %v", fromServer, want)
		}
	}

	inits, _ := metricValue(t, "apiserver_watch_cache_initializations_total", gr)
	initErrs, _ := metricValue(t, "apiserver_watch_cache_initialization_errors_total", gr)
	t.Logf("watch cache (re)initializations during the fault: %v, initialization errors: %v", inits-initsBefore, initErrs-initErrsBefore)
	t.Logf("informer requests since the stop: %v", rec.since(clk.t0, clk))
	imu.Lock()
	var ievAfter []string
	for _, e := range ievents {
		if !e.at.Before(clk.t0) {
			ievAfter = append(ievAfter, clk.at(e.at)+" "+e.desc)
		}
	}
	imu.Unlock()
	t.Logf("informer handler calls since the stop: %v", ievAfter)
}

func feNonBookmarks(evs []feEvent) int {
	n := 0
	for _, e := range evs {
		if e.typ != watch.Bookmark {
			n++
		}
	}
	return n
}

func feTail(evs []feEvent, n int) []string {
	var out []string
	for _, e := range evs[max(0, len(evs)-n):] {
		out = append(out, e.desc)
	}
	return out
}
