package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/watchkeeper/watchkeeper/internal/testchild"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/v1alpha1"
)

// Bad input over HTTP, against the sample apiserver with watchkeeper and
// with upstream's cacher: huge and overflowing resourceVersions, negative and
// huge timeoutSeconds and limit, continue tokens that are not this list's,
// malformed WatchList requests, oversized bodies. Both must answer as the
// table says; where they differ, the case says which one is right (a
// watchkeeper answer pinned there although upstream's is right is a known
// bug: fix cacher/, then the case). Afterwards nothing has changed: the
// server is ready, lists return what was there before with the same RVs, a
// watch sees a new write, and the goroutines of the process come back to
// where they were.
//
// Helpers here carry a bi prefix; requests go through siDo.

const (
	biNamespace = "badinput"
	// biWindow is how long a 200 watch that must stay open is read.
	biWindow = 5 * time.Second
	// biEndWindow bounds the read of any other 200 watch (one that must be
	// closed or end with an ERROR event, or must not be a 200 watch at
	// all): it is read until the server ends it, however loaded the
	// machine, and the bound only stops a watch that never ends.
	biEndWindow = time.Minute
	// biMaxUint64 fits a resourceVersion's uint64 but no etcd revision (an
	// int64); biMaxInt64 is the largest etcd revision.
	biMaxUint64 = "18446744073709551615"
	biMaxInt64  = "9223372036854775807"
	biOverflow  = "99999999999999999999" // more than a uint64 holds
	// biGoroutineSlack absorbs connections and timers that come and go;
	// the storm opens far more watches than this, so a per-watch leak
	// shows.
	biGoroutineSlack = 20
	biStormRepeats   = 20
)

// biCase is one bad request and the outcome (siAnswer.outcome) it must get.
type biCase struct {
	name   string
	method string // GET when empty
	path   string
	query  url.Values
	body   []byte
	want   string
	// upstream is upstream's outcome where it differs from watchkeeper's;
	// the case's comment says which one is right.
	upstream string
	// check looks further into the answer (the items of a list, the
	// events of a watch).
	check func(t *testing.T, a siAnswer)
	// storm: repeated many times at once afterwards, to make a leak per
	// request show in the goroutine count.
	storm bool
}

// biState is what the test wrote before the bad requests, by name.
type biState struct {
	widgets, gadgets map[string]string // name -> resourceVersion
	listRV           string            // a widgets list's RV once all were written
	gadgetToken      string            // continue token of a gadgets list with limit=1
	gadgetTokenRV    int64
}

// outcome sums an answer up: the HTTP status and the Status reason, or for
// a 200 watch what the stream did.
func (a siAnswer) outcome() string {
	reason := func() string {
		switch {
		case a.Status == nil:
			return "(no Status)"
		case a.Status.Reason == "":
			return "(no reason)"
		}
		return string(a.Status.Reason)
	}
	switch {
	case a.Code != http.StatusOK:
		return fmt.Sprintf("%d %s", a.Code, reason())
	case !a.Watch:
		return "200"
	case a.Status != nil:
		return fmt.Sprintf("200 then ERROR %d %s", a.Status.Code, reason())
	case a.Closed:
		return "200 closed"
	default:
		return "200 open"
	}
}

func biContinueToken(start string, rv int64) string {
	data, _ := json.Marshal(map[string]any{"v": "meta.k8s.io/v1", "rv": rv, "start": start})
	return base64.RawURLEncoding.EncodeToString(data)
}

func biWidgetBody(name string, spec string, metadata string) []byte {
	return []byte(`{"apiVersion":"demo.watchkeeper.io/v1alpha1","kind":"Widget","metadata":{"name":"` + name + `"` + metadata +
		`},"spec":{"size":3,"color":"red"` + spec + `}}`)
}

// biCases is the table, for the state st the server holds.
func biCases(st *biState) []biCase {
	list := ssWidgetsPath(biNamespace)
	get := list + "/a-0"
	w := func(kv ...string) url.Values {
		q := url.Values{"watch": {"1"}}
		for i := 0; i < len(kv); i += 2 {
			q.Set(kv[i], kv[i+1])
		}
		return q
	}
	q := func(kv ...string) url.Values {
		v := url.Values{}
		for i := 0; i < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v
	}
	tenK := strings.Repeat("9", 10000)
	// every widget of the namespace, no continue: the limit did not apply
	allItems := func(t *testing.T, a siAnswer) {
		t.Helper()
		names, cont, _ := biListNames(t, a)
		if want := slices.Sorted(maps.Keys(st.widgets)); !slices.Equal(names, want) || cont != "" {
			t.Errorf("items %v continue %q, want %v and no continue", names, cont, want)
		}
	}
	expectTooLarge := func(t *testing.T, a siAnswer) {
		t.Helper()
		if a.Status == nil || a.Status.Details == nil || len(a.Status.Details.Causes) == 0 ||
			a.Status.Details.Causes[0].Type != metav1.CauseTypeResourceVersionTooLarge {
			t.Errorf("want the ResourceVersionTooLarge cause, got %s", a)
		}
	}

	return []biCase{
		// Huge resourceVersions. One a uint64 holds is a valid RV the cache
		// has not reached: it waits for it (3s), then answers 504 with the
		// cause ResourceVersionTooLarge, as upstream's watch cache does.
		{name: "list rv=max uint64", path: list, query: q("resourceVersion", biMaxUint64), want: "504 Timeout", check: expectTooLarge},
		{name: "list rv=max uint64 match=NotOlderThan", path: list, query: q("resourceVersion", biMaxUint64, "resourceVersionMatch", "NotOlderThan"), want: "504 Timeout", check: expectTooLarge},
		// Exact reads of an RV the cache has not reached wait for it and are
		// a 504, as upstream's cache does: etcd would read an RV past int64
		// as revision -1 and fail its own consistency check with a 500.
		{name: "list rv=max uint64 match=Exact", path: list, query: q("resourceVersion", biMaxUint64, "resourceVersionMatch", "Exact"), want: "504 Timeout", check: expectTooLarge},
		{name: "list rv=max uint64 limit=1", path: list, query: q("resourceVersion", biMaxUint64, "limit", "1"), want: "504 Timeout", check: expectTooLarge},
		{name: "list rv=max int64 match=Exact", path: list, query: q("resourceVersion", biMaxInt64, "resourceVersionMatch", "Exact"), want: "504 Timeout", check: expectTooLarge},
		{name: "list rv=overflow", path: list, query: q("resourceVersion", biOverflow), want: "400 BadRequest"},
		{name: "list rv=10k digits", path: list, query: q("resourceVersion", tenK), want: "400 BadRequest"},
		{name: "get rv=max uint64", path: get, query: q("resourceVersion", biMaxUint64), want: "504 Timeout", check: expectTooLarge},
		// An RV that is no number gets the storage package's InvalidError,
		// from both caches as from etcd3 (Kubernetes' storage conformance
		// suite pins it since 1.38): the registry answers a get's 422
		// Invalid and a watch's 500. A 400, as a list answers, would be
		// right for the watch. Past 64 bytes the RV is garbage and
		// watchkeeper answers its own 400, which quotes a prefix of it;
		// upstream's quotes all of it, twice. watchkeeper is right there.
		{name: "get rv=overflow", path: get, query: q("resourceVersion", biOverflow), want: "422 Invalid"},
		{name: "get rv=10k digits", path: get, query: q("resourceVersion", tenK), want: "400 BadRequest", upstream: "422 Invalid"},
		{name: "watch rv=overflow", path: list, query: w("resourceVersion", biOverflow), want: "500 (no reason)"},
		{name: "watch rv=10k digits", path: list, query: w("resourceVersion", tenK), want: "400 BadRequest", upstream: "500 (no reason)"},
		// A plain watch from an RV ahead of the cache opens at once and
		// sends nothing until events pass that RV (which for these never
		// happens), as upstream's cacher and etcd do; only a WatchList
		// waits for the cache to reach its RV, then ends with 504.
		{name: "watch rv=max uint64", path: list, query: w("resourceVersion", biMaxUint64), want: "200 open", storm: true},
		{name: "watch rv=max int64", path: list, query: w("resourceVersion", biMaxInt64), want: "200 open"},
		{name: "watchlist rv=max uint64", path: list, query: w("resourceVersion", biMaxUint64, "sendInitialEvents", "true",
			"resourceVersionMatch", "NotOlderThan", "allowWatchBookmarks", "true"), want: "200 then ERROR 504 Timeout", storm: true},

		// timeoutSeconds is not bounded by the handler (endpoints/handlers/
		// get.go, handleWatch): a negative one is an already expired
		// deadline, and one whose seconds overflow a time.Duration wraps,
		// 2^63-1 to -1s and 9223372037 to a negative value too, so those
		// watches end at once; 9223372036 is 292 years, a watch that
		// stays open. Only a value past int64 fails to parse (400).
		{name: "watch timeoutSeconds=-1", path: list, query: w("resourceVersion", st.listRV, "timeoutSeconds", "-1"), want: "200 closed", check: biNoEvents, storm: true},
		{name: "watch timeoutSeconds=max int64", path: list, query: w("resourceVersion", st.listRV, "timeoutSeconds", biMaxInt64), want: "200 closed", check: biNoEvents},
		{name: "watch timeoutSeconds=9223372037", path: list, query: w("resourceVersion", st.listRV, "timeoutSeconds", "9223372037"), want: "200 closed", check: biNoEvents},
		{name: "watch timeoutSeconds=9223372036", path: list, query: w("resourceVersion", st.listRV, "timeoutSeconds", "9223372036"), want: "200 open", check: biNoEvents, storm: true},
		{name: "watch timeoutSeconds=overflow", path: list, query: w("resourceVersion", st.listRV, "timeoutSeconds", biOverflow), want: "400 BadRequest"},
		{name: "list timeoutSeconds=-1", path: list, query: q("timeoutSeconds", "-1"), want: "200", check: allItems},

		// limit: zero or less is no limit (storage pages only when it is
		// positive); int64's largest is a limit nothing reaches; past int64
		// it fails to parse.
		{name: "list limit=-1", path: list, query: q("limit", "-1"), want: "200", check: allItems},
		{name: "list limit=max int64", path: list, query: q("limit", biMaxInt64), want: "200", check: allItems},
		{name: "list limit=-1 rv=0", path: list, query: q("limit", "-1", "resourceVersion", "0"), want: "200", check: allItems},
		{name: "list limit=max int64 rv=listRV", path: list, query: q("limit", biMaxInt64, "resourceVersion", st.listRV), want: "200", check: allItems},
		{name: "list limit=overflow", path: list, query: q("limit", biOverflow), want: "400 BadRequest"},
		{name: "list limit=abc", path: list, query: q("limit", "abc"), want: "400 BadRequest"},

		// A continue token holds a key relative to the resource's prefix and
		// an RV, nothing naming the resource: a gadgets token decodes on
		// widgets as "the widgets after that key, at that RV" (etcd3's
		// DecodeContinue, in upstream and here alike), so 200 with widgets
		// only. What cannot be decoded, or climbs out of the prefix, is 400.
		{name: "list continue=a gadgets token", path: list, query: q("continue", st.gadgetToken), want: "200", check: func(t *testing.T, a siAnswer) {
			names, _, rv := biListNames(t, a)
			// The gadgets are m-0 and m-1: the token starts after m-0.
			if want := []string{"z-0", "z-1"}; !slices.Equal(names, want) || rv != strconv.FormatInt(st.gadgetTokenRV, 10) {
				t.Errorf("items %v at RV %s, want %v at the token's RV %d", names, rv, want, st.gadgetTokenRV)
			}
		}},
		{name: "list continue=garbage", path: list, query: q("continue", "!!not base64!!"), want: "400 BadRequest"},
		{name: "list continue=base64 of no JSON", path: list, query: q("continue", base64.RawURLEncoding.EncodeToString([]byte("hello"))), want: "400 BadRequest"},
		{name: "list continue=key ../../gadgets", path: list, query: q("continue", biContinueToken("../../gadgets/m-0", st.gadgetTokenRV)), want: "400 BadRequest"},
		{name: "list continue=key /../secrets", path: list, query: q("continue", biContinueToken("/../secrets/x", st.gadgetTokenRV)), want: "400 BadRequest"},
		{name: "list continue=rv 0", path: list, query: q("continue", biContinueToken("a-0", 0)), want: "400 BadRequest"},
		{name: "list continue=unknown version", path: list, query: q("continue", base64.RawURLEncoding.EncodeToString([]byte(`{"v":"meta.k8s.io/v2","rv":5,"start":"a"}`))), want: "400 BadRequest"},
		{name: "list continue with resourceVersion", path: list, query: q("continue", st.gadgetToken, "resourceVersion", st.listRV), want: "400 BadRequest"},
		{name: "list continue=future rv", path: list, query: q("continue", biContinueToken("a-0", 1<<40)), want: "504 Timeout", check: expectTooLarge},

		// WatchList. Without allowWatchBookmarks it is not refused (the
		// validation of ListOptions requires no bookmarks; the apiserver
		// itself turns a plain watch into sendInitialEvents=true): the
		// state comes as ADDED events and, bookmarks not being allowed,
		// no initial-events-end bookmark follows. sendInitialEvents with a
		// resourceVersionMatch other than NotOlderThan, a
		// resourceVersionMatch without it, or it on a list: 422.
		{name: "watchlist without bookmarks", path: list, query: w("sendInitialEvents", "true", "resourceVersionMatch", "NotOlderThan"),
			want: "200 open", storm: true, check: func(t *testing.T, a siAnswer) {
				var added []string
				for _, ev := range a.Events {
					if ev.Type != watch.Added {
						t.Errorf("event %s, want only ADDED (no bookmark was allowed)", ssDescribe(ev))
						continue
					}
					added = append(added, ssMeta(t, ev.Object).GetName())
				}
				slices.Sort(added)
				if want := slices.Sorted(maps.Keys(st.widgets)); !slices.Equal(added, want) {
					t.Errorf("ADDED %v, want %v", added, want)
				}
			}},
		{name: "watchlist without resourceVersionMatch", path: list, query: w("sendInitialEvents", "true", "allowWatchBookmarks", "true"), want: "422 Invalid"},
		{name: "watchlist without resourceVersionMatch nor bookmarks", path: list, query: w("sendInitialEvents", "true"), want: "422 Invalid"},
		{name: "watchlist match=Exact", path: list, query: w("sendInitialEvents", "true", "allowWatchBookmarks", "true", "resourceVersionMatch", "Exact", "resourceVersion", st.listRV), want: "422 Invalid"},
		{name: "watch sendInitialEvents=false without match", path: list, query: w("sendInitialEvents", "false", "resourceVersion", st.listRV), want: "422 Invalid"},
		{name: "watch match=NotOlderThan without sendInitialEvents", path: list, query: w("resourceVersionMatch", "NotOlderThan", "resourceVersion", st.listRV), want: "422 Invalid"},
		{name: "list sendInitialEvents=true", path: list, query: q("sendInitialEvents", "true"), want: "422 Invalid"},

		// Selectors (the watchkeeper-only table of sampleserver_input_test.go,
		// here against upstream too).
		{name: "list labelSelector=a=(", path: list, query: q("labelSelector", "a=("), want: "400 BadRequest"},
		{name: "watch labelSelector=a=(", path: list, query: w("labelSelector", "a=("), want: "400 BadRequest"},
		{name: "watch fieldSelector=spec.size=3", path: list, query: w("fieldSelector", "spec.size=3"), want: "400 BadRequest"},

		// Bodies. Over the generic apiserver's MaxRequestBodyBytes (3MiB):
		// 413 before decoding. Nested past the JSON decoder's depth limit:
		// 400. A megabyte in a field validation bounds: 422. Within 3MiB
		// but over etcd's request limit (1.5MiB), a valid object is refused
		// by etcd; upstream passes that on as a 500, and so does watchkeeper
		// (writes go straight through). The valid object's bytes are in the
		// one field of its metadata that no length bound holds, an owner
		// reference's name: as thousands of labels they took the server
		// (validation and managed fields, per label) past the 34s it gives a
		// write on a loaded machine, a 504 before etcd could refuse.
		{name: "create 4MiB", method: http.MethodPost, path: list, body: biWidgetBody("big", `,"nodeName":"`+strings.Repeat("a", 4<<20)+`"`, ""), want: "413 RequestEntityTooLarge"},
		{name: "patch 4MiB", method: http.MethodPatch, path: get, body: []byte(`{"metadata":{"annotations":{"a":"` + strings.Repeat("a", 4<<20) + `"}}}`), want: "413 RequestEntityTooLarge"},
		{name: "create nested 10001 deep", method: http.MethodPost, path: list, body: biWidgetBody("deep", `,"x":`+strings.Repeat("[", 10001)+strings.Repeat("]", 10001), ""), want: "400 BadRequest"},
		{name: "create 1MiB nodeName", method: http.MethodPost, path: list, body: biWidgetBody("mib", `,"nodeName":"`+strings.Repeat("a", 1<<20+1)+`"`, ""), want: "422 Invalid"},
		{name: "create 2MiB annotation", method: http.MethodPost, path: list, body: biWidgetBody("annotated", "", `,"annotations":{"a":"`+strings.Repeat("a", 2<<20)+`"}`), want: "422 Invalid"},
		{name: "create 1.9MB owner name", method: http.MethodPost, path: list, body: biWidgetBody("owned", "",
			`,"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","uid":"u","name":"`+strings.Repeat("a", 1_900_000)+`"}]`), want: "500 (no reason)"},
	}
}

func biNoEvents(t *testing.T, a siAnswer) {
	t.Helper()
	for _, ev := range a.Events {
		t.Errorf("event %s, want none (nothing was written after the RV)", ssDescribe(ev))
	}
}

// biListNames decodes a 200 list: its items' names, continue and RV.
func biListNames(t *testing.T, a siAnswer) (names []string, cont, rv string) {
	t.Helper()
	var l v1alpha1.WidgetList
	if err := json.Unmarshal([]byte(a.Body), &l); err != nil {
		t.Fatalf("decoding the list: %v", err)
	}
	for _, w := range l.Items {
		names = append(names, w.Name)
	}
	return names, l.Continue, l.ResourceVersion
}

// biSeed writes the state the bad requests must leave alone.
func biSeed(ctx context.Context, t *testing.T, s *sampleServer) *biState {
	t.Helper()
	st := &biState{widgets: map[string]string{}, gadgets: map[string]string{}}
	for _, name := range []string{"a-0", "z-0", "z-1"} {
		w, err := s.Client.DemoV1alpha1().Widgets(biNamespace).Create(ctx, ssWidget(biNamespace, name), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st.widgets[name] = w.ResourceVersion
	}
	for _, name := range []string{"m-0", "m-1"} {
		g, err := s.Client.DemoV1alpha1().Gadgets().Create(ctx, &v1alpha1.Gadget{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.GadgetSpec{Owner: "team"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st.gadgets[name] = g.ResourceVersion
	}
	gl, err := s.Client.DemoV1alpha1().Gadgets().List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil || gl.Continue == "" {
		t.Fatalf("gadgets list with limit=1: continue %q, %v", gl.Continue, err)
	}
	st.gadgetToken = gl.Continue
	st.gadgetTokenRV, err = strconv.ParseInt(gl.ResourceVersion, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	wl, err := s.Client.DemoV1alpha1().Widgets(biNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st.listRV = wl.ResourceVersion
	return st
}

// biGoroutines reads go_goroutines from /metrics. The server runs in this
// process, so it counts the test's goroutines too: what matters is that
// the count comes back, not its value.
func biGoroutines(ctx context.Context, t *testing.T, s *sampleServer) int {
	t.Helper()
	a := siDo(ctx, t, s, s.Admin, http.MethodGet, "/metrics", nil, nil, 0)
	if a.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %s", a)
	}
	sc := bufio.NewScanner(strings.NewReader(a.Body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("go_goroutines %q: %v", v, err)
			}
			return int(f)
		}
	}
	t.Fatal("no go_goroutines in /metrics")
	return 0
}

// biSettledGoroutines is the lowest count seen over at least 2s, and up
// to d while it is still above target: connections and timers of the
// requests just made are still winding down.
func biSettledGoroutines(ctx context.Context, t *testing.T, s *sampleServer, d time.Duration, target int) int {
	t.Helper()
	start := time.Now()
	lowest := biGoroutines(ctx, t, s)
	// Not reaching the target within d is no error here: the caller judges
	// the lowest count. The reads use the test's context, not the poll's,
	// which ends at d.
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, d, false, func(context.Context) (bool, error) {
		lowest = min(lowest, biGoroutines(ctx, t, s))
		return time.Since(start) >= 2*time.Second && lowest <= target, nil
	})
	return lowest
}

// biStacks counts the process's goroutines by stack; the server runs in
// this process, so when the count does not come back, the stacks that grew
// say what was left behind.
func biStacks() map[string]int {
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
		return nil
	}
	// debug=1 writes groups apart by blank lines: "N @ 0x... 0x..." and
	// then a line per frame, "#\t0xaddr\tfunc+0xoff\tfile:line".
	counts := map[string]int{}
	for group := range strings.SplitSeq(b.String(), "\n\n") {
		head, frames, _ := strings.Cut(group, "\n")
		var n int
		if _, err := fmt.Sscanf(head, "%d @", &n); err != nil {
			continue
		}
		var key []string
		for frame := range strings.SplitSeq(frames, "\n") {
			if f := strings.Fields(frame); len(f) == 4 && f[0] == "#" {
				key = append(key, f[2]+" "+f[3])
			}
		}
		counts[strings.Join(key, "\n")] += n
	}
	return counts
}

// biStacksGrown describes the stacks of which after counts more than
// before, the most grown first, each by its innermost frames.
func biStacksGrown(before, after map[string]int) string {
	type grown struct {
		stack string
		by    int
	}
	var gs []grown
	for stack, n := range after {
		if by := n - before[stack]; by > 0 {
			gs = append(gs, grown{stack, by})
		}
	}
	slices.SortFunc(gs, func(a, b grown) int { return b.by - a.by })
	var out strings.Builder
	for _, g := range gs {
		frames := strings.Split(g.stack, "\n")
		fmt.Fprintf(&out, "+%d:\n\t%s\n", g.by, strings.Join(frames[:min(len(frames), 8)], "\n\t"))
	}
	return out.String()
}

func (c biCase) expected(mode string) string {
	if mode == "upstream" && c.upstream != "" {
		return c.upstream
	}
	return c.want
}

func (c biCase) do(ctx context.Context, t *testing.T, s *sampleServer, mode string) siAnswer {
	t.Helper()
	method := c.method
	if method == "" {
		method = http.MethodGet
	}
	window := biEndWindow
	if c.expected(mode) == "200 open" {
		window = biWindow
	}
	return siDo(ctx, t, s, s.Admin, method, c.path, c.query, c.body, window)
}

// TestSampleServerBadInput runs the table against watchkeeper and against
// upstream's cacher, each on a server of its own, and then checks that
// nothing changed.
func TestSampleServerBadInput(t *testing.T) {
	t.Parallel() // in a process of its own: the process's goroutines are what it checks
	if !testchild.Isolate(t) {
		return
	}
	var mu sync.Mutex
	outcomes := map[string]map[string]string{} // mode -> case -> outcome
	var names []string
	for _, mode := range []string{"watchkeeper", "upstream"} {
		t.Run(mode, func(t *testing.T) {
			s := startSampleServer(t, "--watch-cache-decorator="+mode)
			defer s.Stop()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			st := biSeed(ctx, t, s)
			cases := biCases(st)
			outcomes[mode] = map[string]string{}
			names = names[:0]

			t.Run("requests", func(t *testing.T) {
				for _, c := range cases {
					names = append(names, c.name)
					t.Run(c.name, func(t *testing.T) {
						t.Parallel()
						a := c.do(ctx, t, s, mode)
						got := a.outcome()
						mu.Lock()
						outcomes[mode][c.name] = got
						mu.Unlock()
						t.Logf("-> %s in %v: %.300s", got, a.Took.Round(time.Millisecond), a.Body)
						if want := c.expected(mode); got != want {
							t.Errorf("outcome %q, want %q; %s", got, want, a)
						}
						if c.check != nil && got == c.expected(mode) {
							c.check(t, a)
						}
					})
				}
			})

			// The requests above brought every kind of connection, timer and
			// watch into being once; what is left of them now is the
			// baseline the storm must come back to.
			baseline := biSettledGoroutines(ctx, t, s, 3*time.Second, 0)
			stacksBefore := biStacks()
			var wg sync.WaitGroup
			stormed := 0
			for _, c := range cases {
				if !c.storm {
					continue
				}
				for range biStormRepeats {
					stormed++
					wg.Go(func() {
						if got, want := c.do(ctx, t, s, mode).outcome(), c.expected(mode); got != want {
							t.Errorf("storm: %s: outcome %q, want %q", c.name, got, want)
						}
					})
				}
			}
			wg.Wait()
			after := biSettledGoroutines(ctx, t, s, 30*time.Second, baseline+biGoroutineSlack)
			t.Logf("goroutines: %d before %d stormed requests, %d after", baseline, stormed, after)
			if after > baseline+biGoroutineSlack {
				t.Errorf("goroutines: %d after %d bad watches, %d before: more than %d left behind; the stacks that grew:\n%s",
					after, stormed, baseline, biGoroutineSlack, biStacksGrown(stacksBefore, biStacks()))
			}

			biNothingChanged(ctx, t, s, st)
		})
	}

	// The table of request -> outcome, and where the two caches differ.
	var b strings.Builder
	fmt.Fprintf(&b, "%-55s %-28s %s\n", "request", "watchkeeper", "upstream")
	for _, name := range names {
		wk, up := outcomes["watchkeeper"][name], outcomes["upstream"][name]
		mark := ""
		if wk != up {
			mark = "   <- differs"
		}
		fmt.Fprintf(&b, "%-55s %-28s %s%s\n", name, wk, up, mark)
	}
	t.Logf("outcomes:\n%s", b.String())
}

// biNothingChanged: the server is ready, lists return exactly what was
// written before the bad requests (from etcd and from the cache), and a
// watch still sees a new write.
func biNothingChanged(ctx context.Context, t *testing.T, s *sampleServer, st *biState) {
	t.Helper()
	if a := siGet(ctx, t, s, true, "/readyz", nil); a.Code != http.StatusOK {
		t.Errorf("/readyz after the bad requests: %s", a)
	}
	for _, rv := range []string{"", "0"} {
		wl, err := s.Client.DemoV1alpha1().Widgets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{ResourceVersion: rv})
		if err != nil {
			t.Fatalf("listing widgets at RV %q: %v", rv, err)
		}
		got := map[string]string{}
		for _, w := range wl.Items {
			got[w.Namespace+"/"+w.Name] = w.ResourceVersion
		}
		want := map[string]string{}
		for name, v := range st.widgets {
			want[biNamespace+"/"+name] = v
		}
		if !maps.Equal(got, want) {
			t.Errorf("widgets at RV %q after the bad requests: %v, want %v", rv, got, want)
		}
		gl, err := s.Client.DemoV1alpha1().Gadgets().List(ctx, metav1.ListOptions{ResourceVersion: rv})
		if err != nil {
			t.Fatalf("listing gadgets at RV %q: %v", rv, err)
		}
		got = map[string]string{}
		for _, g := range gl.Items {
			got[g.Name] = g.ResourceVersion
		}
		if !maps.Equal(got, st.gadgets) {
			t.Errorf("gadgets at RV %q after the bad requests: %v, want %v", rv, got, st.gadgets)
		}
	}

	wl, err := s.Client.DemoV1alpha1().Widgets(biNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w := ssWatch(ctx, t, s, ssWidgetsPath(biNamespace), url.Values{"watch": {"1"}, "resourceVersion": {wl.ResourceVersion}})
	defer w.Stop()
	created, err := s.Client.DemoV1alpha1().Widgets(biNamespace).Create(ctx, ssWidget(biNamespace, "after"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ev := bhNext(t, w, 10*time.Second)
	if m := ssMeta(t, ev.Object); ev.Type != watch.Added || m.GetName() != "after" || m.GetResourceVersion() != created.ResourceVersion {
		t.Errorf("the watch after the bad requests got %s, want ADDED %s/after@%s", ssDescribe(ev.Event), biNamespace, created.ResourceVersion)
	}
}
