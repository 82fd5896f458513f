package debugview

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"

	"github.com/watchkeeper/watchkeeper/decorator"
	"github.com/watchkeeper/watchkeeper/internal/etcdtest"
	"github.com/watchkeeper/watchkeeper/internal/fixtures"
	"github.com/watchkeeper/watchkeeper/options"
)

// TestHandlerHTMLFromRealCaches renders the page of two real caches over an
// embedded etcd, one written to and watched, one untouched, and reads it
// as an operator would: the chart's axes and counts, durations in units,
// the history as a span, and an empty history in words.
func TestHandlerHTMLFromRealCaches(t *testing.T) {
	etcd := etcdtest.Start(t)
	opts := options.NewWatchCacheOptions()
	opts.BookmarkFrequency = 10 * time.Second
	opts.BookmarkPreDeadlineOffset = 2 * time.Second
	d, err := decorator.NewDecorator(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pods := decorate(ctx, t, d, etcd.Endpoints(), "pods")
	decorate(ctx, t, d, etcd.Endpoints(), "idles")

	var rv string
	for i := range 3 {
		out := &example.Pod{}
		if err := pods.Create(ctx, fmt.Sprintf("/pods/ns/p%d", i), &example.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i), Namespace: "ns"}}, out, 0); err != nil {
			t.Fatal(err)
		}
		rv = out.ResourceVersion
	}
	// Four watchers filed for bookmarks, one plain watch that is not.
	for i := range 5 {
		pred := storage.Everything
		pred.AllowWatchBookmarks = i < 4
		w, err := pods.Watch(ctx, "/pods/", storage.ListOptions{ResourceVersion: rv, Recursive: true, Predicate: pred})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		drain(w)
	}
	caches := d.Caches()
	if len(caches) != 2 {
		t.Fatalf("%d caches, want 2", len(caches))
	}
	// The watchers are filed and the cache has its three events.
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, c := range caches {
			if in := c.Inspect(ctx); in.GroupResource.Resource == "pods" {
				return len(in.Calendar) > 0 && in.History.Events == 3, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("the pods cache never held 3 events and 4 filed watchers: %v", err)
	}

	rec := httptest.NewRecorder()
	Handler(d).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/watchkeeper?refresh=5", nil))
	if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("status %d, content type %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	doc, err := html.Parse(strings.NewReader(rec.Body.String()))
	if err != nil {
		t.Fatalf("the page does not parse: %v", err)
	}
	if m := find(doc, func(n *html.Node) bool { return n.Data == "meta" && attr(n, "http-equiv") == "refresh" }); len(m) != 1 || attr(m[0], "content") != "5" {
		t.Errorf("?refresh=5: want one <meta http-equiv=refresh content=5>, got %d", len(m))
	}

	page := text(doc)
	for _, bad := range []string{"oldest RV 0", "0.0s old", "0.000"} {
		if strings.Contains(page, bad) {
			t.Errorf("the page still reads %q", bad)
		}
	}

	podsSec := section(t, doc, "r-pods")
	chart := svgOf(t, podsSec)
	if got, want := texts(chart, "xtick"), []string{"now", "+1s", "+2s", "+3s", "+4s", "+5s", "+6s", "+7s", "+8s", "+9s", "+10s"}; !slices.Equal(got, want) {
		t.Errorf("time axis labels %q, want %q", got, want)
	}
	if got, want := texts(chart, "ytick"), []string{"0", "1", "2", "3", "4"}; !slices.Equal(got, want) {
		t.Errorf("count axis labels %q, want %q", got, want)
	}
	if got := texts(chart, "xtitle"); len(got) != 1 || got[0] != "time from now (bar: 1s)" {
		t.Errorf("time axis title %q", got)
	}
	if got := texts(chart, "ytitle"); len(got) != 1 || got[0] != "watchers due" {
		t.Errorf("count axis title %q", got)
	}
	// Each bar's count is written over it, and they add up to the watchers
	// filed (all four may share a slot or straddle two).
	sum := 0
	for _, s := range texts(chart, "count") {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Errorf("bar label %q is not a count", s)
		}
		sum += n
	}
	if sum != 4 {
		t.Errorf("bar labels add up to %d watchers, want 4 (labels %q)", sum, texts(chart, "count"))
	}
	if bars := find(chart, func(n *html.Node) bool { return n.Data == "rect" && attr(n, "class") == "slot" }); len(bars) != 10 {
		t.Errorf("%d bars, want one per 1s slot of the 10s period", len(bars))
	}

	podsText := text(podsSec)
	duration := `\d+(\.\d)?(ns|us|ms|s)|\d+m\d\ds`
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`4 watchers filed for bookmarks: 0 due on the next tick, 4 in the next 10s, 0 later`),
		regexp.MustCompile(`a bookmark every 10s, the last 2s before a watch's deadline; calendar slots of 1s, tick jitter 0.25; max staleness off`),
		regexp.MustCompile(`3 events spanning (` + duration + `): RV \d+, (` + duration + `) ago, to RV ` + rv + `, (` + duration + `) ago`),
		regexp.MustCompile(`last heard (` + duration + `) ago`),
		regexp.MustCompile(`took (` + duration + `|none yet)`),
		regexp.MustCompile(`window 25s \(kept at least that long`),
		regexp.MustCompile(`5 streaming: plain watches`),
		regexp.MustCompile(`0 WatchList sending its initial events`),
		regexp.MustCompile(`5 in all`),
	} {
		if !want.MatchString(podsText) {
			t.Errorf("the pods section lacks %q:\n%s", want, podsText)
		}
	}

	idleText := text(section(t, doc, "r-idles"))
	if !regexp.MustCompile(`history empty: no event since RV \d+; a watch resumes from RV \d+ on`).MatchString(idleText) {
		t.Errorf("the untouched cache's history does not read as empty:\n%s", idleText)
	}
	if !strings.Contains(idleText, "Bookmark calendar: no watcher is filed for bookmarks.") || len(find(section(t, doc, "r-idles"), func(n *html.Node) bool { return n.Data == "svg" })) != 0 {
		t.Errorf("the untouched cache's calendar: want the words and no chart:\n%s", idleText)
	}

	// The JSON view is what tools read: still there, same document.
	rec = httptest.NewRecorder()
	Handler(d).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/watchkeeper?format=json", nil))
	var p Page
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || len(p.Resources) != 2 {
		t.Fatalf("JSON view: %v, %d resources", err, len(p.Resources))
	}
}

// TestHuman pins durations in the units a person reads.
func TestHuman(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                                     "0s",
		850 * time.Nanosecond:                 "850ns",
		20 * time.Microsecond:                 "20us",
		1234 * time.Microsecond:               "1.2ms",
		999700 * time.Nanosecond:              "1ms",
		3400 * time.Millisecond:               "3.4s",
		42 * time.Second:                      "42s",
		59700 * time.Millisecond:              "1m",
		125 * time.Second:                     "2m05s",
		time.Hour + 2*time.Minute:             "1h02m",
		-1500 * time.Millisecond:              "-1.5s",
		100 * time.Hour:                       "100h",
		59*time.Minute + 50*time.Second:       "1h",
		59*time.Minute + 20*time.Second:       "59m20s",
		10*time.Millisecond - time.Nanosecond: "10ms",
	} {
		if got := human(d); got != want {
			t.Errorf("human(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestChartAxes checks the axes of periods longer than the default: the
// time axis keeps to about ten labels in round units, and many slots are
// grouped into bars whose counts add up.
func TestChartAxes(t *testing.T) {
	slots := make([]int, 3600) // a 1h frequency in 1s slots
	slots[0], slots[1], slots[1799], slots[3599] = 2, 3, 7, 1
	c := newChart(slots, time.Second)
	var xs, ys []string
	for _, x := range c.XTicks {
		xs = append(xs, x.Label)
	}
	for _, y := range c.YTicks {
		ys = append(ys, y.Label)
	}
	if want := []string{"now", "+10m", "+20m", "+30m", "+40m", "+50m", "+1h"}; !slices.Equal(xs, want) {
		t.Errorf("time axis %q, want %q", xs, want)
	}
	if want := []string{"0", "2", "4", "6", "8"}; !slices.Equal(ys, want) {
		t.Errorf("count axis %q, want %q", ys, want)
	}
	if len(c.Bars) != maxBars || c.Bars[0].Count != 5 || c.Bars[59].Count != 7 || c.Bars[119].Count != 1 {
		t.Errorf("%d bars, counts %d %d %d; want %d bars of 30s, 5, 7, 1", len(c.Bars), c.Bars[0].Count, c.Bars[59].Count, c.Bars[119].Count, maxBars)
	}
	if c.XTitle != "time from now (bar: 30s)" {
		t.Errorf("time axis title %q", c.XTitle)
	}
	if empty := newChart(make([]int, 60), time.Second); empty.YTicks[len(empty.YTicks)-1].Label != "1" || len(empty.XTicks) != 7 {
		t.Errorf("an empty calendar: count axis to %s, %d time labels; want to 1 and now..+1m by 10s", empty.YTicks[len(empty.YTicks)-1].Label, len(empty.XTicks))
	}
}

func decorate(ctx context.Context, t *testing.T, d *decorator.Decorator, endpoints []string, resource string) storage.Interface {
	t.Helper()
	cfg := storagebackend.NewDefaultConfig("/registry", fixtures.ProtoCodec)
	cfg.Transport.ServerList = endpoints
	prefix := "/" + resource + "/"
	s, destroy, err := d.Decorate(cfg.ForResource(schema.GroupResource{Resource: resource}), prefix,
		func(obj runtime.Object) (string, error) { return storage.NamespaceKeyFunc(prefix, obj) },
		fixtures.PodReverseKeyFunc(prefix), fixtures.NewPod, fixtures.NewPodList, fixtures.PodAttrs, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(destroy)
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return s.ReadinessCheck() == nil, nil
	}); err != nil {
		t.Fatalf("%s never became ready: %v", resource, err)
	}
	return s
}

// drain reads a watch until it is stopped, as a client that keeps up.
func drain(w watch.Interface) {
	go func() {
		for range w.ResultChan() {
		}
	}()
}

func find(n *html.Node, match func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	for c := range n.Descendants() {
		if c.Type == html.ElementNode && match(c) {
			out = append(out, c)
		}
	}
	return out
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

// text is the node's visible text, whitespace collapsed; an SVG's text is
// left out.
func text(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && (n.Data == "svg" || n.Data == "style" || n.Data == "title") {
			return
		}
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
			b.WriteByte(' ')
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return strings.Join(strings.Fields(b.String()), " ")
}

func section(t *testing.T, doc *html.Node, id string) *html.Node {
	t.Helper()
	s := find(doc, func(n *html.Node) bool { return n.Data == "section" && attr(n, "id") == id })
	if len(s) != 1 {
		t.Fatalf("%d sections with id %s, want 1", len(s), id)
	}
	return s[0]
}

func svgOf(t *testing.T, sec *html.Node) *html.Node {
	t.Helper()
	s := find(sec, func(n *html.Node) bool { return n.Data == "svg" })
	if len(s) != 1 {
		t.Fatalf("%d charts in the section, want 1", len(s))
	}
	return s[0]
}

// texts returns the text of the chart's <text> elements of a class, in
// document order.
func texts(chart *html.Node, class string) []string {
	var out []string
	for _, n := range find(chart, func(n *html.Node) bool { return n.Data == "text" && attr(n, "class") == class }) {
		out = append(out, strings.TrimSpace(text(n)))
	}
	return out
}
