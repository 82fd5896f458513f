package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	"k8s.io/client-go/rest"
	restwatch "k8s.io/client-go/rest/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/watchkeeper/watchkeeper/internal/testchild"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/v1alpha1"
	clientset "github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/generated/clientset/versioned"
	clientscheme "github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/generated/clientset/versioned/scheme"
	informers "github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/generated/informers/externalversions"
)

// Watch behaviour of the sample apiserver over HTTP, end to end: WatchList
// (through client-go's informer and raw), the bookmark schedule, the
// pre-deadline bookmark, 410 Expired and re-list. Timings are short real
// ones and every bound is generous; the t.Logf figures are for information.
//
// Helpers here carry an ss prefix; they reuse behaviour_test.go's bhCollect,
// bhNext, bhWaitClosed, bhSpacing and bhRoundAll.

const (
	ssGroupPath    = "/apis/demo.watchkeeper.io/v1alpha1"
	ssInitialEnd   = "k8s.io/initial-events-end"
	ssWidgetSize   = 3
	ssTestDeadline = 30 * time.Second
)

func ssWidgetsPath(ns string) string { return ssGroupPath + "/namespaces/" + ns + "/widgets" }

// ssRequest is one request a client made, as its transport saw it.
type ssRequest struct {
	Method string
	URL    *url.URL
}

func (r ssRequest) String() string { return r.Method + " " + r.URL.RequestURI() }

// ssRecorder records every request of the clients built on a config.
type ssRecorder struct {
	mu   sync.Mutex
	reqs []ssRequest
}

// wrap returns a copy of cfg whose transport records into r.
func (r *ssRecorder) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return ssRoundTripper(func(req *http.Request) (*http.Response, error) {
			u := *req.URL
			r.mu.Lock()
			r.reqs = append(r.reqs, ssRequest{Method: req.Method, URL: &u})
			r.mu.Unlock()
			return rt.RoundTrip(req)
		})
	})
	return cfg
}

func (r *ssRecorder) requests() []ssRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reqs)
}

type ssRoundTripper func(*http.Request) (*http.Response, error)

func (f ssRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// ssIsWatch reports whether a request is a watch (watch=true or watch=1).
func ssIsWatch(r ssRequest) bool {
	v := r.URL.Query().Get("watch")
	b, _ := strconv.ParseBool(v)
	return b || v == "1"
}

// ssDo sends GET path?query with cfg's credentials and TLS, bound by ctx.
func ssDo(ctx context.Context, t *testing.T, s *sampleServer, cfg *rest.Config, path string, query url.Values) *http.Response {
	t.Helper()
	tr, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	u := s.URL + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	return resp
}

// ssWatch opens a watch stream with the admin token and decodes it as
// client-go does. A non-200 answer fails the test with its body.
func ssWatch(ctx context.Context, t *testing.T, s *sampleServer, path string, query url.Values) watch.Interface {
	t.Helper()
	resp := ssDo(ctx, t, s, s.Admin, path, query)
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("GET %s?%s = %d %s", path, query.Encode(), resp.StatusCode, body)
	}
	return ssStream(resp)
}

// ssStream decodes a 200 watch response body into events.
func ssStream(resp *http.Response) watch.Interface {
	info, ok := runtime.SerializerInfoForMediaType(clientscheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
	if !ok || info.StreamSerializer == nil {
		panic("no JSON stream serializer")
	}
	frames := info.StreamSerializer.Framer.NewFrameReader(resp.Body)
	dec := restwatch.NewDecoder(streaming.NewDecoder(frames, info.StreamSerializer.Serializer), clientscheme.Codecs.UniversalDeserializer())
	return watch.NewStreamWatcher(dec, apierrors.NewClientErrorReporter(http.StatusInternalServerError, http.MethodGet, "ClientWatchDecoding"))
}

func ssMeta(t *testing.T, obj runtime.Object) metav1.Object {
	t.Helper()
	m, err := meta.Accessor(obj)
	if err != nil {
		t.Fatalf("metadata of %T: %v", obj, err)
	}
	return m
}

func ssRV(t *testing.T, obj runtime.Object) uint64 {
	t.Helper()
	rv, err := strconv.ParseUint(ssMeta(t, obj).GetResourceVersion(), 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion of %T: %v", obj, err)
	}
	return rv
}

func ssDescribe(ev watch.Event) string {
	switch o := ev.Object.(type) {
	case *metav1.Status:
		return fmt.Sprintf("%s status %d %s %q", ev.Type, o.Code, o.Reason, o.Message)
	case metav1.Object:
		return fmt.Sprintf("%s %s/%s@%s %v", ev.Type, o.GetNamespace(), o.GetName(), o.GetResourceVersion(), o.GetAnnotations())
	}
	return fmt.Sprintf("%s %T", ev.Type, ev.Object)
}

func ssInitialEventsEnd(t *testing.T, ev watch.Event) bool {
	t.Helper()
	return ev.Type == watch.Bookmark && ssMeta(t, ev.Object).GetAnnotations()[ssInitialEnd] == "true"
}

func ssWidget(ns, name string) *v1alpha1.Widget {
	return &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1alpha1.WidgetSpec{Size: ssWidgetSize}}
}

// ssCreateWidgets creates n widgets name-0..name-(n-1) in ns with a few
// writers at once, and returns the created objects by name.
func ssCreateWidgets(ctx context.Context, t *testing.T, c clientset.Interface, ns, prefix string, n int) map[string]*v1alpha1.Widget {
	t.Helper()
	const writers = 16
	var (
		mu      sync.Mutex
		created = map[string]*v1alpha1.Widget{}
		errs    []error
		wg      sync.WaitGroup
		next    = make(chan int)
	)
	for range writers {
		wg.Go(func() {
			for i := range next {
				w, err := c.DemoV1alpha1().Widgets(ns).Create(ctx, ssWidget(ns, fmt.Sprintf("%s-%d", prefix, i)), metav1.CreateOptions{})
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					created[w.Name] = w
				}
				mu.Unlock()
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("creating %d widgets in %s: %d failed, first: %v", n, ns, len(errs), errs[0])
	}
	return created
}

// TestSampleServerWatchListInformer: a shared informer from the generated
// informers package, with client-go's WatchListClient on, syncs 300 widgets
// through one WatchList stream and never issues a LIST.
func TestSampleServerWatchListInformer(t *testing.T) {
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, true)
	if !clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient) {
		t.Fatalf("client-go's WatchListClient is off")
	}
	s := startSampleServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), ssTestDeadline)
	defer cancel()

	const ns, n = "wl", 300
	start := time.Now()
	created := ssCreateWidgets(ctx, t, s.Client, ns, "w", n)
	t.Logf("created %d widgets in %v", n, time.Since(start).Round(time.Millisecond))

	rec := &ssRecorder{}
	client, err := clientset.NewForConfig(rec.wrap(s.Admin))
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	informer := ssStartInformer(ctx, t, client, ns)
	t.Logf("informer synced %d widgets in %v", len(informer.GetStore().List()), time.Since(start).Round(time.Millisecond))

	got := map[string]string{}
	for _, obj := range informer.GetStore().List() {
		w := obj.(*v1alpha1.Widget)
		got[w.Name] = w.ResourceVersion
	}
	if len(got) != n {
		t.Errorf("informer store has %d widgets, want %d", len(got), n)
	}
	for name, w := range created {
		if rv, ok := got[name]; !ok {
			t.Errorf("informer store lacks %s", name)
		} else if rv != w.ResourceVersion {
			t.Errorf("informer store has %s@%s, created at %s", name, rv, w.ResourceVersion)
		}
	}

	var watchList, lists []ssRequest
	for _, r := range rec.requests() {
		if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/widgets") {
			continue
		}
		t.Logf("informer request: %s", r)
		q := r.URL.Query()
		switch {
		case ssIsWatch(r) && q.Get("sendInitialEvents") == "true":
			watchList = append(watchList, r)
		case !ssIsWatch(r):
			lists = append(lists, r)
		}
	}
	if len(watchList) == 0 {
		t.Errorf("no watch request with sendInitialEvents=true for widgets")
	}
	for _, r := range lists {
		t.Errorf("plain LIST for widgets: %s (WatchList should have replaced it)", r)
	}
	for _, r := range watchList {
		q := r.URL.Query()
		if q.Get("allowWatchBookmarks") != "true" || q.Get("resourceVersionMatch") != string(metav1.ResourceVersionMatchNotOlderThan) {
			t.Errorf("WatchList request %s lacks allowWatchBookmarks=true or resourceVersionMatch=NotOlderThan", r)
		}
	}
}

// TestSampleServerRawWatchList: over plain HTTP, sendInitialEvents=true gets
// every object as ADDED, then one bookmark annotated
// k8s.io/initial-events-end at or above the last write, then live events.
func TestSampleServerRawWatchList(t *testing.T) {
	s := startSampleServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), ssTestDeadline)
	defer cancel()

	const ns, n = "ns", 40
	created := ssCreateWidgets(ctx, t, s.Client, ns, "w", n)
	var floor uint64
	for _, w := range created {
		floor = max(floor, ssRV(t, w))
	}

	q := url.Values{
		"watch":                {"1"},
		"sendInitialEvents":    {"true"},
		"allowWatchBookmarks":  {"true"},
		"resourceVersionMatch": {string(metav1.ResourceVersionMatchNotOlderThan)},
	}
	start := time.Now()
	w := ssWatch(ctx, t, s, ssWidgetsPath(ns), q)
	defer w.Stop()

	added := map[string]string{}
	var end bhReceived
	for end.Object == nil {
		ev := bhNext(t, w, 10*time.Second)
		switch {
		case ev.Type == watch.Added:
			m := ssMeta(t, ev.Object)
			if _, dup := added[m.GetName()]; dup {
				t.Errorf("initial object %s sent twice", m.GetName())
			}
			added[m.GetName()] = m.GetResourceVersion()
		case ssInitialEventsEnd(t, ev.Event):
			end = ev
		default:
			t.Fatalf("before the initial-events-end bookmark: %s", ssDescribe(ev.Event))
		}
	}
	endRV := ssRV(t, end.Object)
	t.Logf("%d initial ADDED, then the initial-events-end bookmark at RV %d (last write %d) %v after the request",
		len(added), endRV, floor, end.at.Sub(start).Round(time.Millisecond))
	if len(added) != n {
		t.Errorf("got %d initial objects, want %d", len(added), n)
	}
	for name, w := range created {
		if rv, ok := added[name]; !ok {
			t.Errorf("initial events lack %s", name)
		} else if rv != w.ResourceVersion {
			t.Errorf("initial event %s@%s, created at %s", name, rv, w.ResourceVersion)
		}
	}
	if endRV < floor {
		t.Errorf("initial-events-end bookmark at RV %d is below the last write %d", endRV, floor)
	}

	live, err := s.Client.DemoV1alpha1().Widgets(ns).Create(ctx, ssWidget(ns, "live"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev := bhNext(t, w, 10*time.Second)
		if ev.Type == watch.Bookmark {
			if ssInitialEventsEnd(t, ev.Event) {
				t.Errorf("a second initial-events-end bookmark: %s", ssDescribe(ev.Event))
			}
			continue
		}
		m := ssMeta(t, ev.Object)
		if ev.Type != watch.Added || m.GetName() != "live" || m.GetResourceVersion() != live.ResourceVersion {
			t.Fatalf("after the initial events got %s, want ADDED %s/live@%s", ssDescribe(ev.Event), ns, live.ResourceVersion)
		}
		if ssRV(t, ev.Object) <= endRV {
			t.Errorf("live event at RV %s is not above the initial-events-end bookmark %d", m.GetResourceVersion(), endRV)
		}
		break
	}
}

// TestSampleServerIdleBookmarks: a watch on a resource nobody writes hears a
// bookmark about every --watch-cache-bookmark-frequency.
func TestSampleServerIdleBookmarks(t *testing.T) {
	// Mostly waiting for the schedule, with a server of its own and nothing
	// process-wide read: runs beside the other such tests.
	t.Parallel()
	// Room for five heartbeats, three if each comes a jittered tick late.
	const frequency, observe = 2 * time.Second, 10500 * time.Millisecond
	s := startSampleServer(t, "--watch-cache-bookmark-frequency=2s", "--watch-cache-bookmark-pre-deadline-offset=1s")
	ctx, cancel := context.WithTimeout(context.Background(), ssTestDeadline)
	defer cancel()

	// RV unset: the apiserver turns this legacy watch into
	// sendInitialEvents=true, so the first bookmark is the (immediate)
	// initial-events-end one; the rest are heartbeats.
	start := time.Now()
	w := ssWatch(ctx, t, s, ssGroupPath+"/gadgets", url.Values{"watch": {"1"}, "allowWatchBookmarks": {"true"}})
	defer w.Stop()
	events, closed := bhCollect(w, observe)
	if closed {
		t.Fatalf("watch closed after %d events", len(events))
	}
	var at []time.Time
	for i, ev := range events {
		if ev.Type != watch.Bookmark {
			t.Fatalf("nothing was written, got %s", ssDescribe(ev.Event))
		}
		if marked := ssInitialEventsEnd(t, ev.Event); marked != (i == 0) {
			t.Errorf("bookmark %d: initial-events-end annotation %v", i, marked)
		}
		at = append(at, ev.at)
	}
	// The first is the initial-events-end bookmark, sent at once: the
	// heartbeats are the rest.
	bhCheckHeartbeats(t, at[0], at[1:], observe-at[0].Sub(start), frequency)
}

// TestSampleServerTimeoutBookmark: a watch with timeoutSeconds hears one
// bookmark --watch-cache-bookmark-pre-deadline-offset before the server
// ends it, then the stream ends.
func TestSampleServerTimeoutBookmark(t *testing.T) {
	t.Parallel() // its own etcd and server; no gate, no process-wide metric
	const timeout, offset = 6 * time.Second, 2 * time.Second
	s := startSampleServer(t, "--watch-cache-bookmark-frequency=1m", "--watch-cache-bookmark-pre-deadline-offset=2s")
	ctx, cancel := context.WithTimeout(context.Background(), ssTestDeadline)
	defer cancel()

	// Start from the list's RV: no initial events, so the only bookmark due
	// within 6s is the pre-deadline one.
	list, err := s.Client.DemoV1alpha1().Gadgets().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q := url.Values{
		"watch":               {"1"},
		"allowWatchBookmarks": {"true"},
		"resourceVersion":     {list.ResourceVersion},
		"timeoutSeconds":      {strconv.Itoa(int(timeout / time.Second))},
	}
	start := time.Now()
	w := ssWatch(ctx, t, s, ssGroupPath+"/gadgets", q)
	defer w.Stop()
	events, closed := bhCollect(w, timeout+5*time.Second)
	end := time.Now()
	if !closed {
		t.Fatalf("watch with timeoutSeconds=%d still open after %v", int(timeout/time.Second), end.Sub(start).Round(time.Millisecond))
	}
	for _, ev := range events {
		t.Logf("%s at +%v", ssDescribe(ev.Event), ev.at.Sub(start).Round(time.Millisecond))
	}
	if len(events) != 1 || events[0].Type != watch.Bookmark {
		t.Fatalf("got %d events, want exactly the pre-deadline bookmark", len(events))
	}
	lead := end.Sub(events[0].at)
	t.Logf("pre-deadline bookmark %v before the stream ended (offset %v); stream lasted %v (timeoutSeconds %v)",
		lead.Round(time.Millisecond), offset, end.Sub(start).Round(time.Millisecond), timeout)
	if lower, upper := 250*time.Millisecond, 3500*time.Millisecond; lead < lower || lead > upper {
		t.Errorf("bookmark lead %v, want within [%v, %v]", lead, lower, upper)
	}
	if d := end.Sub(start); d < timeout-time.Second || d > timeout+3*time.Second {
		t.Errorf("stream lasted %v, want about timeoutSeconds %v", d, timeout)
	}
	if rv := ssRV(t, events[0].Object); rv < mustParseRV(t, list.ResourceVersion) {
		t.Errorf("bookmark at RV %d is below the watch's start %s", rv, list.ResourceVersion)
	}
}

func mustParseRV(t *testing.T, rv string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", rv, err)
	}
	return v
}

// ssChurn writes to widgets in ns until stopped: creates, updates and
// deletes, so the history keeps moving.
type ssChurn struct {
	cancel context.CancelFunc
	done   chan struct{}
	writes atomic.Int64
	err    error // set by the writer, read after done
}

func ssStartChurn(ctx context.Context, c clientset.Interface, ns string, every time.Duration) *ssChurn {
	ctx, cancel := context.WithCancel(ctx)
	ch := &ssChurn{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(ch.done)
		widgets := c.DemoV1alpha1().Widgets(ns)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			name := fmt.Sprintf("c-%d", i%7)
			var err error
			switch (i / 7) % 3 {
			case 0:
				_, err = widgets.Create(ctx, ssWidget(ns, name), metav1.CreateOptions{})
			case 1:
				var w *v1alpha1.Widget
				if w, err = widgets.Get(ctx, name, metav1.GetOptions{}); err == nil {
					w.Spec.Size++
					_, err = widgets.Update(ctx, w, metav1.UpdateOptions{})
				}
			case 2:
				err = widgets.Delete(ctx, name, metav1.DeleteOptions{})
			}
			if err != nil {
				if ctx.Err() == nil && ch.err == nil {
					ch.err = err
				}
				continue
			}
			ch.writes.Add(1)
		}
	}()
	return ch
}

func (c *ssChurn) stop(t *testing.T) {
	t.Helper()
	c.cancel()
	<-c.done
	if c.err != nil {
		t.Errorf("churn: %v", c.err)
	}
}

// ssWant is an event a watcher must see.
type ssWant struct {
	Type watch.EventType
	Name string
	RV   string
}

// TestSampleServerExpiredAndRelist: a watch from an RV inside the history
// window gets every later event; from an RV older than the window whose
// room later writes needed it gets 410 Expired in the stream; a reflector whose watch hits 410 re-lists and
// its store converges on a consistent LIST.
func TestSampleServerExpiredAndRelist(t *testing.T) {
	t.Parallel() // in a process of its own: it sets a client-go feature gate
	if !testchild.Isolate(t) {
		return
	}
	const window, frequency = 3 * time.Second, time.Second
	s := startSampleServer(t, "--watch-cache-bookmark-frequency=1s", "--watch-cache-bookmark-pre-deadline-offset=500ms",
		"--watch-cache-events-history-window=3s")
	// Room for the inside-the-window phase to be made again on a busy machine.
	ctx, cancel := context.WithTimeout(context.Background(), 2*ssTestDeadline)
	defer cancel()
	widgets := func(ns string) interface {
		Create(context.Context, *v1alpha1.Widget, metav1.CreateOptions) (*v1alpha1.Widget, error)
		Update(context.Context, *v1alpha1.Widget, metav1.UpdateOptions) (*v1alpha1.Widget, error)
		Delete(context.Context, string, metav1.DeleteOptions) error
	} {
		return s.Client.DemoV1alpha1().Widgets(ns)
	}

	// The old RV: the last of a few writes, soon older than the window.
	var oldRV string
	for i := range 5 {
		w, err := widgets("old").Create(ctx, ssWidget("old", fmt.Sprintf("o-%d", i)), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		oldRV = w.ResourceVersion
	}
	if err := widgets("old").Delete(ctx, "o-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	oldWritten := time.Now()
	churn := ssStartChurn(ctx, s.Client, "churn", 150*time.Millisecond)
	defer churn.stop(t)

	// Inside the window: every event after the RV, in order, once. The
	// window is the promise: the resume must come within it of the list.
	// On a machine so busy that the writes below outlast it, the attempt
	// proves nothing either way and is made again, up to three times.
	t.Run("inside the window", func(t *testing.T) {
		for attempt := 1; ; attempt++ {
			ns := fmt.Sprintf("lossless-%d", attempt)
			took, ok := ssResumeInsideWindow(ctx, t, s, ns, window)
			if ok {
				return
			}
			t.Logf("attempt %d: the resume came %v after the list, not inside the %v window; again", attempt, took.Round(time.Millisecond), window)
			if attempt == 3 {
				t.Fatalf("three attempts could not resume within the %v window of their list: the machine is too busy for this test", window)
			}
		}
	})

	// Past the window (plus two jittered ticks and slack), with churn moving
	// the history meanwhile. Age alone evicts nothing (upstream keeps its
	// buffer until it needs the room): 100 more writes, the fewest the
	// history keeps, make it need the room of the old events.
	time.Sleep(time.Until(oldWritten.Add(window + 2*frequency*5/4 + time.Second)))
	t.Run("past the window", func(t *testing.T) {
		for i := range 100 {
			if _, err := widgets("filler").Create(ctx, ssWidget("filler", fmt.Sprintf("f-%d", i)), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		// A consistent list is served once the cache has caught up.
		if _, err := s.Client.DemoV1alpha1().Widgets("filler").List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		w := ssWatch(ctx, t, s, ssWidgetsPath("old"), url.Values{"watch": {"1"}, "resourceVersion": {oldRV}})
		defer w.Stop()
		ev := bhNext(t, w, 10*time.Second)
		status, ok := ev.Object.(*metav1.Status)
		if ev.Type != watch.Error || !ok {
			t.Fatalf("watch from RV %s, %v old, got %s, want ERROR 410", oldRV, time.Since(oldWritten).Round(time.Millisecond), ssDescribe(ev.Event))
		}
		t.Logf("watch from RV %s, %v after it was written (churn: %d writes): %d %s %q",
			oldRV, time.Since(oldWritten).Round(time.Millisecond), churn.writes.Load(), status.Code, status.Reason, status.Message)
		if status.Code != http.StatusGone || status.Reason != metav1.StatusReasonExpired {
			t.Errorf("got code %d reason %q, want %d %q", status.Code, status.Reason, http.StatusGone, metav1.StatusReasonExpired)
		}
		bhWaitClosed(t, w, 5*time.Second)
	})

	// A reflector (WatchList off, so it LISTs then WATCHes) whose first
	// watch asks for the expired RV: it gets 410, re-lists and converges.
	t.Run("reflector re-lists", func(t *testing.T) {
		clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, false)
		rec := &ssRecorder{}
		client, err := clientset.NewForConfig(rec.wrap(s.Admin))
		if err != nil {
			t.Fatal(err)
		}
		var injected sync.Once
		lw := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
				return client.DemoV1alpha1().Widgets(metav1.NamespaceAll).List(ctx, opts)
			},
			WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
				injected.Do(func() { opts.ResourceVersion = oldRV })
				return client.DemoV1alpha1().Widgets(metav1.NamespaceAll).Watch(ctx, opts)
			},
		}
		informer := cache.NewSharedIndexInformer(lw, &v1alpha1.Widget{}, 0, cache.Indexers{})
		ictx, icancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); informer.RunWithContext(ictx) }()
		defer func() { icancel(); <-done }()
		if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
			t.Fatal("informer did not sync")
		}
		// More churn while the reflector recovers.
		for i := range 5 {
			if _, err := widgets("after").Create(ctx, ssWidget("after", fmt.Sprintf("a-%d", i)), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if err := widgets("old").Delete(ctx, "o-1", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		churn.stop(t)
		churn.err = nil

		var want, got map[string]string
		_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
			list, err := s.Client.DemoV1alpha1().Widgets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			want = map[string]string{}
			for _, w := range list.Items {
				want[w.Namespace+"/"+w.Name] = w.ResourceVersion
			}
			got = map[string]string{}
			for _, obj := range informer.GetStore().List() {
				w := obj.(*v1alpha1.Widget)
				got[w.Namespace+"/"+w.Name] = w.ResourceVersion
			}
			return fmt.Sprint(got) == fmt.Sprint(want), nil
		})
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("informer store never converged on the consistent LIST:\n store %v\n list  %v", got, want)
		} else {
			t.Logf("informer store converged on the consistent LIST: %d widgets", len(want))
		}

		var lists int
		var sawOld bool
		for _, r := range rec.requests() {
			if r.Method != http.MethodGet {
				continue
			}
			t.Logf("reflector request: %s", r)
			if !ssIsWatch(r) {
				lists++
			} else if r.URL.Query().Get("resourceVersion") == oldRV {
				sawOld = true
			}
		}
		if !sawOld {
			t.Errorf("no watch from the expired RV %s was made", oldRV)
		}
		if lists < 2 {
			t.Errorf("%d LIST requests, want the initial one and a re-list after 410", lists)
		}
	})
}

// ssResumeInsideWindow makes 23 changes in ns after a list, then watches from
// the list's RV and checks it gets every change, in order, once, and then
// the next write. It reports false, checking nothing, when the watch opened
// more than window after the list: then the history owes it nothing.
func ssResumeInsideWindow(ctx context.Context, t *testing.T, s *sampleServer, ns string, window time.Duration) (time.Duration, bool) {
	t.Helper()
	widgets := s.Client.DemoV1alpha1().Widgets(ns)
	list, err := widgets.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	listed := time.Now()
	var want []ssWant
	for i := range 10 {
		w, err := widgets.Create(ctx, ssWidget(ns, fmt.Sprintf("l-%d", i)), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, ssWant{watch.Added, w.Name, w.ResourceVersion})
		w.Spec.Size = 7
		if w, err = widgets.Update(ctx, w, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		want = append(want, ssWant{watch.Modified, w.Name, w.ResourceVersion})
	}
	for i := range 3 {
		name := fmt.Sprintf("l-%d", i)
		if err := widgets.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		want = append(want, ssWant{watch.Deleted, name, ""})
	}
	w := ssWatch(ctx, t, s, ssWidgetsPath(ns), url.Values{"watch": {"1"}, "resourceVersion": {list.ResourceVersion}})
	defer w.Stop()
	// The watch's headers have come: it is registered, its start decided.
	if took := time.Since(listed); took >= window {
		return took, false
	}
	var got []ssWant
	for range want {
		ev := bhNext(t, w, 10*time.Second)
		m := ssMeta(t, ev.Object)
		got = append(got, ssWant{ev.Type, m.GetName(), m.GetResourceVersion()})
	}
	// Anything more would be a duplicate: the next event must be the next
	// write in ns.
	fence, err := widgets.Create(ctx, ssWidget(ns, "fence"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ev := bhNext(t, w, 10*time.Second); ev.Type != watch.Added || ssMeta(t, ev.Object).GetName() != "fence" {
		t.Errorf("after the %d changes got %s, want the next write, ADDED %s/fence@%s", len(want), ssDescribe(ev.Event), ns, fence.ResourceVersion)
	}
	t.Logf("watch from RV %s, opened %v after the list (inside the %v window, churn running elsewhere), got %d events",
		list.ResourceVersion, time.Since(listed).Round(time.Millisecond), window, len(got))
	for i := range want {
		if want[i].Type == watch.Deleted {
			// A deletion carries the RV of the delete, unknown to the client.
			got[i].RV = ""
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("watch from RV %s:\n got  %v\n want %v", list.ResourceVersion, got, want)
	}
	return time.Since(listed), true
}

// ssStartInformer starts a widgets informer of namespace ns over client,
// with client-go's defaults (WatchList on) and handlers added before it
// starts, waits until it has synced, and stops it when the test ends.
func ssStartInformer(ctx context.Context, t *testing.T, client clientset.Interface, ns string, handlers ...cache.ResourceEventHandler) cache.SharedIndexInformer {
	t.Helper()
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns))
	informer := factory.Demo().V1alpha1().Widgets().Informer()
	for _, h := range handlers {
		if _, err := informer.AddEventHandler(h); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	t.Cleanup(func() {
		close(stop)
		factory.Shutdown()
	})
	factory.Start(stop)
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("informer for %v did not sync", typ)
		}
	}
	return informer
}
