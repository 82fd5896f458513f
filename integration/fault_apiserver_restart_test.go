package integration

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/watchkeeper/watchkeeper/internal/etcdtest"
	clientset "github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/generated/clientset/versioned"
)

// The fourth fault of issue 6: the apiserver restarted. A client resuming
// from its last bookmark RV, within the history window, continues without
// a re-list.
//
// Two sample apiservers share one etcd, as an HA pair would: the server
// under test, and another that takes the writes while it is down. The
// server under test is stopped and a new one started on the same etcd,
// port and data directory (so the same URL, certificate and token). Two
// clients follow it across the restart:
//
//   - a raw watch with allowWatchBookmarks: writes stop, it gets a bookmark
//     at or above the last write, the server stops, and once the new one is
//     ready it watches from that bookmark's RV. The writes made during the
//     restart (through the other server) and after it (through the new one)
//     must arrive exactly once, in order, with no 410;
//   - a client-go shared informer (WatchList on), which resumes by itself:
//     after the stop it must only ever watch from an RV, never LIST nor
//     WatchList again, and its store must converge on etcd.
//
// The clients reach the server through a gate (fcGate) that drops their
// connections when the server goes down, as a crash would: a server that
// stops gracefully waits up to its request timeout (60s) for open watches
// to end before it exits.
//
// The new server's cache starts its history at its first list of etcd, at
// a revision above the bookmark (the other server wrote meanwhile), so
// serving the resume needs the events between the bookmark and that list.
//
// Helpers here carry an rs prefix; they reuse fault_etcd_restart_test.go's
// feFollow, feWriter, feRecorder and feClock, and fault_compaction_test.go's
// fcGate and fcConverge.

const (
	rsWindow = 30 * time.Second // the history window; the restart takes far less
)

func TestFaultAPIServerRestart(t *testing.T) {
	t.Parallel() // its own etcd and server; no gate, no process-wide metric
	start := time.Now()
	etcd := etcdtest.Start(t)
	dir := etcdtest.DataDir(t)
	port := freeLoopbackPort(t)
	args := []string{"--etcd-servers=" + etcd.Endpoints()[0], "--data-dir=" + dir, "--secure-port=" + strconv.Itoa(port),
		"--watch-cache-bookmark-frequency=1s", "--watch-cache-bookmark-pre-deadline-offset=500ms",
		"--watch-cache-events-history-window=" + rsWindow.String()}
	s := startSampleServer(t, args...)
	other := startSampleServer(t, "--etcd-servers="+etcd.Endpoints()[0])
	ec := etcd.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()

	for _, ns := range []string{feRawNS, feInfNS} {
		ssCreateWidgets(ctx, t, s.Client, ns, "pre", 6)
	}
	list, err := s.Client.DemoV1alpha1().Widgets(feRawNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// The raw watch, with bookmarks.
	gate := newFcGate()
	rawClient, err := clientset.NewForConfig(gate.wrap(s.Admin))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := rawClient.DemoV1alpha1().Widgets(feRawNS).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion, AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Stop()
	before := feFollow(raw)

	// The informer.
	rec := &feRecorder{}
	iclient, err := clientset.NewForConfig(rec.wrap(gate.wrap(s.Admin)))
	if err != nil {
		t.Fatal(err)
	}
	// Open again before the informer stops (at the test's end).
	defer gate.open()
	informer := ssStartInformer(ctx, t, iclient, feInfNS)

	// Changes before the restart, then a bookmark that covers them.
	wr := &feWriter{c: s.Client}
	wr.resize(ctx, t, "pre-0", 5)
	wr.delete(ctx, t, "pre-1")
	wr.create(ctx, t, "a-0")
	lastRV := mustParseRV(t, wr.written[len(wr.written)-1].rv)
	if !before.waitFor(10*time.Second, func(evs []feEvent) bool {
		return feNonBookmarks(evs) >= len(wr.written) && rsLastBookmark(evs) >= lastRV
	}) {
		evs, _ := before.snapshot()
		t.Fatalf("no bookmark at or above the last write (rv=%d) within 10s; the watch saw %v", lastRV, feTail(evs, 5))
	}
	fcConverge(ctx, t, ec, informer, "before the restart")
	evs, _ := before.snapshot()
	var got []feWrite
	for _, e := range evs {
		if e.typ != watch.Bookmark {
			got = append(got, rsWrite(e))
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(wr.written) {
		t.Fatalf("before the restart the raw watch saw %v, want %v", got, wr.written)
	}
	t.Logf("before the restart: %d changes seen by the raw watch, a bookmark at or above the last write rv=%d; informer synced", len(got), lastRV)

	// The restart: the server goes down, the other one takes writes
	// meanwhile. The clients' connections drop; the informer's retries are
	// refused until the new server listens.
	clk := feClock{t0: time.Now()}
	gate.close()
	s.Stop()
	stopped := time.Now()
	gate.open()
	before.waitFor(10*time.Second, func([]feEvent) bool { return false })
	evs, closedAt := before.snapshot()
	if closedAt.IsZero() {
		t.Errorf("the raw watch is still open 10s after its connection dropped")
	}
	// What the client resumes from: the last bookmark it received, which is
	// at or above every change it saw (none came after it).
	bookmark := rsLastBookmark(evs)
	if e := evs[len(evs)-1]; e.typ != watch.Bookmark {
		t.Fatalf("the raw watch's last event before the restart is %s, not a bookmark", e.desc)
	}
	from := len(wr.written)
	wr.c = other.Client
	wr.resize(ctx, t, "pre-2", 7)
	wr.create(ctx, t, "during-0")
	wr.delete(ctx, t, "pre-3")
	during := len(wr.written) - from
	restarting := time.Now()
	s2 := startSampleServer(t, args...)
	ready := time.Now()
	t.Logf("[%s] server stopped (Stop took %v); %d changes through the other server; new server ready at %s (start took %v)",
		clk.at(stopped), stopped.Sub(clk.t0).Round(time.Millisecond), during, clk.at(ready), ready.Sub(restarting).Round(time.Millisecond))

	// The raw client resumes from its last bookmark.
	resumed, err := rawClient.DemoV1alpha1().Widgets(feRawNS).Watch(ctx, metav1.ListOptions{ResourceVersion: strconv.FormatUint(bookmark, 10), AllowWatchBookmarks: true})
	if err != nil {
		t.Fatalf("resuming from rv=%d: %v", bookmark, err)
	}
	defer resumed.Stop()
	after := feFollow(resumed)
	wr.c = s2.Client
	wr.create(ctx, t, "after-0")
	wr.resize(ctx, t, "during-0", 9)
	wr.delete(ctx, t, "pre-4")
	want := wr.written[from:]
	complete := after.waitFor(15*time.Second, func(evs []feEvent) bool { return feNonBookmarks(evs) >= len(want) })
	if complete {
		// Then up to the next bookmark: nothing more is written, and a
		// bookmark comes after everything sent before it, so anything extra
		// has shown by then.
		after.waitFor(10*time.Second, func(evs []feEvent) bool {
			return len(evs) > 0 && evs[len(evs)-1].typ == watch.Bookmark && feNonBookmarks(evs) >= len(want)
		})
	}
	evs, closedAt = after.snapshot()
	got = nil
	var errs, bookmarks []string
	var firstAt time.Time
	for _, e := range evs {
		switch e.typ {
		case watch.Error:
			errs = append(errs, clk.at(e.at)+" "+e.desc)
		case watch.Bookmark:
			bookmarks = append(bookmarks, clk.at(e.at)+"@"+e.rv)
		default:
			if firstAt.IsZero() {
				firstAt = e.at
			}
			got = append(got, rsWrite(e))
		}
	}
	t.Logf("raw watch resumed from bookmark rv=%d: %d of %d changes (%d made during the restart), errors %v, closed %v, bookmarks %v",
		bookmark, len(got), len(want), during, errs, !closedAt.IsZero(), bookmarks)
	if !firstAt.IsZero() {
		t.Logf("first change after the resume arrived at %s, %v after the new server was ready", clk.at(firstAt), firstAt.Sub(ready).Round(time.Millisecond))
	}
	for _, e := range errs {
		if strings.Contains(e, "410") {
			t.Errorf("resuming from the last bookmark rv=%d, %v after it was sent and within the %v history window, got %s: the client must re-list",
				bookmark, time.Since(clk.t0).Round(time.Second), rsWindow, e)
		} else {
			t.Errorf("resuming from rv=%d: %s", bookmark, e)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the resumed watch did not deliver the changes made during and after the restart exactly once, in order:\n got  %v\n want %v", got, want)
	}
	if !closedAt.IsZero() && len(errs) == 0 {
		t.Errorf("the resumed watch closed at %s", clk.at(closedAt))
	}

	// The informer resumes by itself; it must not re-list.
	converged := time.Now()
	fcConverge(ctx, t, ec, informer, "after the restart")
	reqs := rec.since(clk.t0, clk)
	var relists []string
	for _, r := range reqs {
		if !strings.Contains(r, " GET ") {
			continue
		}
		uri := r[strings.Index(r, " GET ")+5:]
		u, err := url.Parse(strings.Fields(uri)[0])
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		if q.Get("watch") == "" || q.Get("sendInitialEvents") == "true" || q.Get("resourceVersion") == "" || q.Get("resourceVersion") == "0" {
			relists = append(relists, r)
		}
	}
	t.Logf("informer converged on etcd %v after the last write; its requests since the stop: %v", time.Since(converged).Round(time.Millisecond), reqs)
	if len(relists) > 0 {
		t.Errorf("the informer re-listed after the restart: %v", relists)
	}
	t.Logf("took %v", time.Since(start).Round(time.Millisecond))
}

// rsLastBookmark is the RV of the last bookmark among evs, 0 if none.
func rsLastBookmark(evs []feEvent) uint64 {
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].typ == watch.Bookmark {
			rv, _ := strconv.ParseUint(evs[i].rv, 10, 64)
			return rv
		}
	}
	return 0
}

// rsWrite is a watch event as a writer records it (a deletion's RV is
// unknown to the writer).
func rsWrite(e feEvent) feWrite {
	w := feWrite{e.typ, e.name, e.rv}
	if e.typ == watch.Deleted {
		w.rv = ""
	}
	return w
}
