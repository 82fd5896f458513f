package restartprobe

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

// answer is one scripted /readyz?verbose answer: the failed checks, or
// none (200), or no answer at all (the connection closed).
type answer struct {
	noAnswer bool
	failed   []string
}

// fakeReadyz serves script, one entry per request, then 200 for good; each
// request moves clk 100ms on, so that poll k is sent at k*100ms.
func fakeReadyz(t *testing.T, clk *testingclock.FakePassiveClock, script []answer) (*httptest.Server, *atomic.Int64) {
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" || r.URL.RawQuery != "verbose" {
			t.Errorf("request %s, want /readyz?verbose", r.URL)
		}
		n := int(served.Add(1)) - 1
		clk.SetTime(clk.Now().Add(100 * time.Millisecond))
		if n >= len(script) {
			fmt.Fprint(w, "[+]ping ok\nreadyz check passed\n")
			return
		}
		a := script[n]
		if a.noAnswer {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		var b strings.Builder
		b.WriteString("[+]ping ok\n")
		for _, c := range a.failed {
			fmt.Fprintf(&b, "[-]%s failed: reason withheld\n", c)
		}
		if len(a.failed) == 0 {
			fmt.Fprint(&b, "readyz check passed\n")
		} else {
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(&b, "readyz check failed\n")
		}
		fmt.Fprint(w, b.String())
	}))
	t.Cleanup(srv.Close)
	return srv, &served
}

func TestPollerRecordsHowLongEachCheckFailedAndTheLastToPass(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakePassiveClock(base)
	rbac := "poststarthook/rbac/bootstrap-roles"
	script := []answer{
		{failed: []string{"shutdown"}}, // 0ms: the old process, before the exit
		{noAnswer: true},               // 100ms: nobody listening yet
		{failed: []string{"informer-sync", rbac, "watch-caches"}},         // 200ms: the first answer
		{failed: []string{"informer-sync", rbac, "watch-caches", "etcd"}}, // 300ms
		{failed: []string{"informer-sync", rbac}},                         // 400ms: watch-caches passed, etcd too
		{noAnswer: true}, // 500ms: an answer lost
		{failed: []string{"etcd", rbac, "informer-sync"}}, // 600ms: etcd fails again
		{failed: []string{rbac, "informer-sync"}},         // 700ms: etcd passed
		{},                                  // 800ms: ready
		{failed: []string{"informer-sync"}}, // 900ms: after ready, not counted
	}
	srv, served := fakeReadyz(t, clk, script)
	// A new connection per poll: the transport retries a GET whose reused
	// connection closed without an answer, which would hide "no answer".
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	var recorded atomic.Int64
	p := Start(context.Background(), Config{Client: client, URL: srv.URL, Interval: time.Millisecond, Clock: clk,
		Observe: func(Poll) { recorded.Add(1) }})
	deadline := time.Now().Add(time.Minute) // generous: a busy machine
	for recorded.Load() < int64(len(script))+1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	polls := p.Stop()
	if int(served.Load()) != len(polls) && int(served.Load()) != len(polls)+1 {
		t.Errorf("%d requests served, %d polls recorded", served.Load(), len(polls))
	}
	if len(polls) < len(script) {
		t.Fatalf("%d polls, want at least %d", len(polls), len(script))
	}
	for i, want := range script {
		if got := polls[i].At.Sub(base); got != time.Duration(i)*100*time.Millisecond {
			t.Fatalf("poll %d sent at %v, want %v (polls are sequential)", i, got, time.Duration(i)*100*time.Millisecond)
		}
		if want.noAnswer != (polls[i].Status == 0) {
			t.Errorf("poll %d: status %d (%s), want an answer: %v", i, polls[i].Status, polls[i].Err, !want.noAnswer)
		}
	}

	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	tl := Analyze(polls, base.Add(ms(50)))
	if !tl.Answered || tl.FirstAnswer != ms(150) || !tl.IsReady || tl.Ready != ms(750) {
		t.Errorf("first answer %v (%v), ready %v (%v); want 150ms, 750ms after the exit", tl.FirstAnswer, tl.Answered, tl.Ready, tl.IsReady)
	}
	if tl.Slowest != ms(100) {
		t.Errorf("slowest answer %v, want 100ms", tl.Slowest)
	}
	// The last to pass first; ties by how long they failed, then name.
	want := []Check{
		{Name: "informer-sync", FirstFailed: ms(150), Failed: ms(600), Passed: ms(750)},
		{Name: rbac, FirstFailed: ms(150), Failed: ms(600), Passed: ms(750)},
		{Name: "etcd", FirstFailed: ms(250), Failed: ms(200), Passed: ms(650)},
		{Name: "watch-caches", FirstFailed: ms(150), Failed: ms(200), Passed: ms(350)},
	}
	if fmt.Sprint(tl.Checks) != fmt.Sprint(want) {
		t.Errorf("checks:\n got %v\nwant %v", tl.Checks, want)
	}
	if got := tl.LastToPass(); fmt.Sprint(got) != fmt.Sprint(want[:2]) {
		t.Errorf("last to pass %v, want %v", got, want[:2])
	}
	wantLine := "/readyz: first answer 200ms after the exit, ready 800ms after; last checks to pass: informer-sync (600ms), " + rbac + " (600ms)"
	if got := tl.Summary(); got != wantLine {
		t.Errorf("summary\n %q, want\n %q", got, wantLine)
	}

	// Stopped before ready: the checks of the last answer are still
	// failing, and first.
	tl = Analyze(polls[:8], base.Add(ms(50)))
	if tl.IsReady || len(tl.Checks) != 4 || !tl.Checks[0].StillFailing || tl.Checks[0].Name != "informer-sync" || tl.Checks[2].StillFailing {
		t.Errorf("stopped before ready: ready %v, checks %+v", tl.IsReady, tl.Checks)
	}
}
