package integration

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/watchkeeper/watchkeeper/debugview"
	"github.com/watchkeeper/watchkeeper/internal/testchild"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/v1alpha1"
)

// Issue 7 over HTTP: per-resource overrides, fresh bookmarks, WatchList
// waits that end instead of starving, and the debug view. Helpers carry a
// by prefix.

const byDebugPath = "/debug/watchkeeper"

// byBookmarks reads w for d and returns when each bookmark came and its RV.
func byBookmarks(w watch.Interface, d time.Duration) (at []time.Time, rvs []uint64) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return at, rvs
			}
			if ev.Type == watch.Bookmark {
				m, _ := ev.Object.(metav1.Object)
				rv, _ := strconv.ParseUint(m.GetResourceVersion(), 10, 64)
				at, rvs = append(at, time.Now()), append(rvs, rv)
			}
		case <-timer.C:
			return at, rvs
		}
	}
}

func byWatchQuery(rv string) url.Values {
	return url.Values{"watch": {"1"}, "allowWatchBookmarks": {"true"}, "resourceVersion": {rv}, "timeoutSeconds": {"600"}}
}

// One flag gives widgets a 2s heartbeat while gadgets keep the minute; a
// resource the server does not serve is refused at start-up with the list of
// the served ones.
func TestSampleServerResourceOverrides(t *testing.T) {
	t.Parallel() // in a process of its own: it runs the server's command, which sets up the process's logging
	if !testchild.Isolate(t) {
		return
	}
	s := startSampleServer(t,
		"--watch-cache-resource-overrides=widgets.demo.watchkeeper.io:bookmark-frequency=2s,bookmark-pre-deadline-offset=500ms,events-history-window=10s")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wl, err := s.Client.DemoV1alpha1().Widgets("ov").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gl, err := s.Client.DemoV1alpha1().Gadgets().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	widgets := ssWatch(ctx, t, s, ssWidgetsPath("ov"), byWatchQuery(wl.ResourceVersion))
	defer widgets.Stop()
	gadgets := ssWatch(ctx, t, s, ssGroupPath+"/gadgets", byWatchQuery(gl.ResourceVersion))
	defer gadgets.Stop()
	start := time.Now()
	var wg sync.WaitGroup
	var wAt, gAt []time.Time
	wg.Go(func() { wAt, _ = byBookmarks(widgets, 7*time.Second) })
	wg.Go(func() { gAt, _ = byBookmarks(gadgets, 7*time.Second) })
	wg.Wait()
	var gaps []string
	for i, at := range wAt {
		prev := start
		if i > 0 {
			prev = wAt[i-1]
		}
		gaps = append(gaps, at.Sub(prev).Round(10*time.Millisecond).String())
	}
	t.Logf("in 7s: widgets (2s override) got %d bookmarks, gaps %v; gadgets (default 1m) got %d", len(wAt), gaps, len(gAt))
	if len(wAt) < 2 || len(wAt) > 4 {
		t.Errorf("widgets got %d bookmarks in 7s, want 2..4 at a 2s frequency", len(wAt))
	}
	if len(gAt) != 0 {
		t.Errorf("gadgets got %d bookmarks in 7s with the default 1m frequency", len(gAt))
	}

	code, out := siRunCommand(t, "--data-dir="+t.TempDir(), "--secure-port="+strconv.Itoa(freeLoopbackPort(t)),
		"--watch-cache-resource-overrides=widgits.demo.watchkeeper.io:bookmark-frequency=5s")
	t.Logf("unknown resource: exit %d: %s", code, strings.TrimSpace(out))
	if code == 0 || !strings.Contains(out, "widgits.demo.watchkeeper.io") ||
		!strings.Contains(out, "it serves: gadgets.demo.watchkeeper.io, widgets.demo.watchkeeper.io") {
		t.Errorf("an override of an unknown resource: exit %d, output %q; want a failure naming it and the served resources", code, out)
	}
	code, out = siRunCommand(t, "--data-dir="+t.TempDir(), "--secure-port="+strconv.Itoa(freeLoopbackPort(t)),
		"--watch-cache-resource-overrides=widgets.demo.watchkeeper.io:bookmark-frequency=5s,bookmark-pre-deadline-offset=6s")
	t.Logf("invalid override: exit %d: %s", code, strings.TrimSpace(out))
	if code == 0 || !strings.Contains(out, "--watch-cache-resource-overrides for widgets.demo.watchkeeper.io: --watch-cache-bookmark-pre-deadline-offset=6s: must be less than") {
		t.Errorf("an invalid override: exit %d, output %q", code, out)
	}
}

// byStaleness measures how stale the bookmarks of an idle resource (widgets)
// are while another resource (gadgets) is written every 100ms: a bookmark at
// RV r received at t is stale by t minus the moment etcd moved past r (the
// first gadget write above r), or 0 when nothing was written above r yet.
// It also returns the bookmarks' RVs, in order.
func byStaleness(t *testing.T, args ...string) ([]time.Duration, []uint64) {
	s := startSampleServer(t, append([]string{"--watch-cache-bookmark-frequency=1s", "--watch-cache-bookmark-pre-deadline-offset=200ms"}, args...)...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g, err := s.Client.DemoV1alpha1().Gadgets().Create(ctx, &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: "clock"}, Spec: v1alpha1.GadgetSpec{Owner: "t"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wl, err := s.Client.DemoV1alpha1().Widgets("idle").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	type write struct {
		rv uint64
		at time.Time
	}
	var mu sync.Mutex
	var writes []write
	wctx, stopWrites := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for n := int32(1); wctx.Err() == nil; n++ {
			g = g.DeepCopy()
			g.Spec.Replicas = &n
			next, err := s.Client.DemoV1alpha1().Gadgets().Update(wctx, g, metav1.UpdateOptions{})
			if err != nil {
				return
			}
			rv, _ := strconv.ParseUint(next.ResourceVersion, 10, 64)
			mu.Lock()
			writes = append(writes, write{rv, time.Now()})
			mu.Unlock()
			g = next
			time.Sleep(100 * time.Millisecond)
		}
	})
	w := ssWatch(ctx, t, s, ssWidgetsPath("idle"), byWatchQuery(wl.ResourceVersion))
	defer w.Stop()
	at, rvs := byBookmarks(w, 12*time.Second)
	stopWrites()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	var stale []time.Duration
	for i, rv := range rvs {
		var d time.Duration
		for _, wr := range writes {
			if wr.rv > rv {
				d = max(at[i].Sub(wr.at), 0)
				break
			}
		}
		stale = append(stale, d)
	}
	return stale, rvs
}

// byLongestRun is the most consecutive bookmarks that carried one RV.
func byLongestRun(rvs []uint64) int {
	longest, run := 0, 0
	for i, rv := range rvs {
		if i > 0 && rv == rvs[i-1] {
			run++
		} else {
			run = 1
		}
		longest = max(longest, run)
	}
	return longest
}

// With --watch-cache-bookmark-max-staleness the idle resource's bookmarks
// carry an RV etcd confirmed within the bound; without it they lag until
// the storage liveness probe (a third of the 15s silence timeout) or a
// progress notification moves the cache.
//
// What is asserted does not depend on when the client got to read: with
// the 2s bound, bookmarks every second and etcd moving every 100ms, no more
// than three bookmarks in a row carry one RV (the bound, plus a slot of
// scheduling); and the bound makes the median bookmark fresher than without
// it, both measured alike. How stale each bookmark was when read is logged:
// the figure is a benchmark's.
func TestSampleServerFreshBookmarks(t *testing.T) {
	// Mostly waiting for the schedule, with a server of its own and nothing
	// process-wide read: runs beside the other such tests.
	t.Parallel()
	summary := func(d []time.Duration) (p50, worst time.Duration) {
		if len(d) == 0 {
			return 0, 0
		}
		s := slices.Clone(d)
		slices.Sort(s)
		return s[len(s)/2], s[len(s)-1]
	}
	without, rvsWithout := byStaleness(t)
	with, rvsWith := byStaleness(t, "--watch-cache-bookmark-max-staleness=2s")
	p50o, maxo := summary(without)
	p50w, maxw := summary(with)
	round := func(d []time.Duration) []string {
		var out []string
		for _, x := range d {
			out = append(out, x.Round(10*time.Millisecond).String())
		}
		return out
	}
	t.Logf("bookmark staleness on an idle resource while another is written every 100ms, 12s:\n  without the bound: %d bookmarks, p50 %v, max %v: %v\n  with max-staleness=2s: %d bookmarks, p50 %v, max %v: %v",
		len(without), p50o.Round(time.Millisecond), maxo.Round(time.Millisecond), round(without),
		len(with), p50w.Round(time.Millisecond), maxw.Round(time.Millisecond), round(with))
	runWith, runWithout := byLongestRun(rvsWith), byLongestRun(rvsWithout)
	t.Logf("bookmark RVs with the bound %v (at most %d in a row alike); without %v (at most %d)", rvsWith, runWith, rvsWithout, runWithout)
	if len(with) < 8 || len(without) < 8 {
		t.Fatalf("too few bookmarks to judge: %d with, %d without", len(with), len(without))
	}
	// Two bookmarks within the bound, one more for the slot the refresh
	// lands in.
	if runWith > 3 {
		t.Errorf("with a 2s bound, %d bookmarks a second apart in a row carried one RV while etcd moved every 100ms: %v", runWith, rvsWith)
	}
	if p50w >= p50o {
		t.Errorf("the bound made bookmarks no fresher: p50 %v with, %v without", p50w, p50o)
	}
}

// A WatchList whose floor the cache cannot reach (the client asks for an RV
// etcd has not got to) is not polled forever: after the freshness timeout
// it ends with a 504 in the stream, which makes client-go fall back to a
// LIST, and the metric counts it.
func TestSampleServerWatchListEndsInsteadOfStarving(t *testing.T) {
	t.Parallel() // in a process of its own: it reads the process-wide metrics
	if !testchild.Isolate(t) {
		return
	}
	s := startSampleServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := s.Client.DemoV1alpha1().Widgets("wl").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rv, _ := strconv.ParseUint(l.ResourceVersion, 10, 64)
	gr := map[string]string{"group": "demo.watchkeeper.io", "resource": "widgets", "request": "watchlist"}
	before, _ := metricValue(t, "watchkeeper_watch_cache_freshness_timeouts_total", gr)
	const clients = 20
	q := url.Values{"watch": {"1"}, "sendInitialEvents": {"true"}, "allowWatchBookmarks": {"true"},
		"resourceVersionMatch": {"NotOlderThan"}, "resourceVersion": {strconv.FormatUint(rv+1000, 10)}}
	type answer struct {
		took time.Duration
		desc string
		code int32
	}
	answers := make(chan answer, clients)
	for range clients {
		go func() {
			start := time.Now()
			a := siDo(ctx, t, s, s.Admin, http.MethodGet, ssWidgetsPath("wl"), q, nil, 10*time.Second)
			an := answer{took: time.Since(start), desc: a.String()}
			if a.Status != nil {
				an.code = a.Status.Code
			}
			answers <- an
		}()
	}
	// A wait the freshness timeout does not end lasts until the request's
	// context does (the minute above); 30s leaves a loaded machine room
	// over the 3s and still tells the two apart.
	for range clients {
		a := <-answers
		if a.code != http.StatusGatewayTimeout || a.took > 30*time.Second {
			t.Errorf("WatchList from an RV the cache cannot reach: %s after %v, want a 504 within the 3s freshness timeout", a.desc, a.took)
		}
	}
	after, _ := metricValue(t, "watchkeeper_watch_cache_freshness_timeouts_total", gr)
	t.Logf("%d WatchList requests for RV %d (etcd at %d) each ended with 504; freshness_timeouts_total{request=watchlist} %v -> %v", clients, rv+1000, rv, before, after)
	if after-before != clients {
		t.Errorf("freshness_timeouts_total{request=watchlist} moved by %v, want %d", after-before, clients)
	}
}

// The debug view: JSON and HTML, for the admin only.
func TestSampleServerDebugView(t *testing.T) {
	s := startSampleServer(t, "--watch-cache-bookmark-frequency=10s")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ssCreateWidgets(ctx, t, s.Client, "dbg", "w", 3)
	l, err := s.Client.DemoV1alpha1().Widgets("dbg").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		w := ssWatch(ctx, t, s, ssWidgetsPath("dbg"), byWatchQuery(l.ResourceVersion))
		defer w.Stop()
	}

	get := func(anonymous bool, query url.Values) (int, string, string) {
		cfg := s.Admin
		if anonymous {
			cfg = s.Anonymous
		}
		resp := ssDo(ctx, t, s, cfg, byDebugPath, query)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(body)
	}
	var page debugview.Page
	widgets, gadgets := -1, -1
	// Until the four watchers have had their initial-events-end bookmark;
	// the checks below say what is missing if they never do.
	_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		code, ctype, body := get(false, url.Values{"format": {"json"}})
		if code != http.StatusOK || !strings.HasPrefix(ctype, "application/json") {
			t.Fatalf("GET %s?format=json: %d %s %s", byDebugPath, code, ctype, body)
		}
		if err := json.Unmarshal([]byte(body), &page); err != nil {
			t.Fatalf("decoding %s: %v", body, err)
		}
		for i, r := range page.Resources {
			switch r.Resource {
			case "widgets":
				widgets = i
			case "gadgets":
				gadgets = i
			}
		}
		return widgets >= 0 && page.Resources[widgets].Watchers["BookmarkSent"] >= 4, nil
	})
	if widgets < 0 || gadgets < 0 || len(page.Resources) != 2 {
		t.Fatalf("resources in the debug view: %+v", page.Resources)
	}
	w := page.Resources[widgets]
	pretty, _ := json.MarshalIndent(w, "", "  ")
	t.Logf("widgets in the debug view:\n%s", pretty)
	filed := 0
	for _, n := range w.Calendar.Slots {
		filed += n
	}
	switch {
	case !w.Ready || w.Group != "demo.watchkeeper.io":
		t.Errorf("widgets not ready or in the wrong group: %+v", w)
	case w.Watchers["BookmarkSent"] != 4:
		t.Errorf("widgets watchers by state: %v, want 4 BookmarkSent", w.Watchers)
	case len(w.Calendar.Slots) != 10 || filed != 4 || w.Calendar.Filed != 4:
		t.Errorf("widgets calendar: %+v, want 4 watchers in 10 slots of 1s", w.Calendar)
	case w.History.Events < 3 || w.History.NewestRV < w.History.OldestRV || w.History.NewestRV > w.CacheRV:
		t.Errorf("widgets history: %+v (cache RV %d)", w.History, w.CacheRV)
	case w.EtcdError != "" || w.EtcdRV < w.CacheRV:
		t.Errorf("cache RV %d against etcd RV %d (%s)", w.CacheRV, w.EtcdRV, w.EtcdError)
	case w.Schedule.BookmarkFrequency != 10:
		t.Errorf("schedule: %+v", w.Schedule)
	}

	code, ctype, body := get(false, nil)
	if code != http.StatusOK || !strings.HasPrefix(ctype, "text/html") || !strings.Contains(body, "<svg") ||
		!strings.Contains(body, "widgets.demo.watchkeeper.io") || strings.Count(body, `class="slot"`) < 10 || !strings.Contains(body, `class="xtick"`) {
		// The chart draws the calendars of the resources that have watchers:
		// widgets' 10 slots, with a time axis.
		t.Errorf("HTML view: %d %s, %d bytes, svg %v, %d slot bars, time axis %v", code, ctype, len(body), strings.Contains(body, "<svg"),
			strings.Count(body, `class="slot"`), strings.Contains(body, `class="xtick"`))
	}
	if code, _, body := get(true, nil); code != http.StatusUnauthorized {
		t.Errorf("anonymous GET %s: %d %s, want 401", byDebugPath, code, body)
	}
}
