package main

import (
	"context"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"golang.org/x/net/http2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
)

// The linearizability check on made-up histories of one key: each case a
// history a client could record, with or without the fault it names.
func TestCheckLinearizability(t *testing.T) {
	start := time.Unix(1000, 0)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	op := func(client int, kind linKind, call, ret int, code linCode, rv uint64) linOp {
		return linOp{client: client, kind: kind, key: 0, call: at(call), ret: at(ret), code: code, rv: rv}
	}
	create := func(call, ret int, rv uint64) linOp { return op(0, linCreate, call, ret, codeOK, rv) }
	update := func(call, ret int, precond, rv uint64) linOp {
		o := op(0, linUpdate, call, ret, codeOK, rv)
		o.precond = precond
		return o
	}
	get := func(call, ret int, rv uint64) linOp { return op(1, linGet, call, ret, codeOK, rv) }
	list := func(call, ret int, listRV uint64, rv uint64) linOp {
		o := op(1, linList, call, ret, codeOK, 0)
		o.key, o.listRV, o.items = -1, listRV, map[int]uint64{}
		if rv != 0 {
			o.items[0] = rv
		}
		return o
	}
	unknown := func(o linOp, token string) linOp { o.code, o.rv, o.token = codeUnknown, 0, token; return o }

	keys := newKeyTable()
	k0 := keys.id(linNamespace + "/" + linKeyName(0))
	version := func(rv uint64, token string) *attrs { return &attrs{ns: linNamespace, rv: rv, token: token} }
	// etcd's history: created @10, updated @12 by op "u", read by the
	// checker's watch at 1ms and 5ms.
	truth := []truthEvent{
		{rev: 10, key: k0, typ: watch.Added, cur: version(10, "c"), at: at(1)},
		{rev: 12, key: k0, typ: watch.Modified, cur: version(12, "u"), prev: version(10, "c"), at: at(5)},
	}
	for _, tc := range []struct {
		name    string
		ops     []linOp
		verdict porcupine.CheckResult
	}{
		{"sequential and right", []linOp{create(0, 1, 10), get(2, 3, 10), update(4, 5, 10, 12), get(6, 7, 12), list(8, 9, 12, 12)}, porcupine.Ok},
		{"a stale consistent GET", []linOp{create(0, 1, 10), update(2, 3, 10, 12), get(4, 5, 10)}, porcupine.Illegal},
		{"a stale consistent LIST", []linOp{create(0, 1, 10), update(2, 3, 10, 12), list(4, 5, 11, 10)}, porcupine.Illegal},
		{"a GET during an update may see either", []linOp{create(0, 1, 10), update(2, 6, 10, 12), get(3, 4, 10), get(4, 5, 12)}, porcupine.Ok},
		{"a GET that sees the update then the version before", []linOp{create(0, 1, 10), update(2, 9, 10, 12), get(3, 4, 12), get(5, 6, 10)}, porcupine.Illegal},
		{"a conflict on the current version", []linOp{create(0, 1, 10), func() linOp { o := op(0, linUpdate, 2, 3, codeConflict, 0); o.precond = 10; return o }()}, porcupine.Illegal},
		{"an update with no answer that etcd has", []linOp{create(0, 1, 10), unknown(update(2, 3, 10, 0), "u"), get(7, 8, 12)}, porcupine.Ok},
		{"an update with no answer that etcd has not", []linOp{create(0, 1, 10), unknown(update(2, 3, 10, 0), "lost"), get(7, 8, 12)}, porcupine.Illegal},
		{"an update with no answer, seen before etcd's watch got it", []linOp{create(0, 1, 10), unknown(update(2, 3, 10, 0), "u"), get(4, 4, 12)}, porcupine.Ok},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			rep := checkLinearizability(tc.ops, truth, keys, 1, start, dir, time.Minute)
			if rep.verdict != tc.verdict {
				t.Fatalf("verdict %s, want %s; %s", rep.verdict, tc.verdict, rep.failure())
			}
			if tc.verdict != porcupine.Illegal {
				return
			}
			if !strings.Contains(rep.failure(), "the shortest history that is not linearizable") {
				t.Errorf("no failing part printed: %q", rep.failure())
			}
			if rep.visualization == "" {
				t.Fatal("no visualization saved")
			}
			if fi, err := os.Stat(rep.visualization); err != nil || fi.Size() == 0 || filepath.Dir(rep.visualization) != dir {
				t.Errorf("visualization %s: %v", rep.visualization, err)
			}
		})
	}

	// The smallest failing part ends at the stale read, not after it.
	ops := []linOp{create(0, 1, 10), update(2, 3, 10, 12), get(4, 5, 10), get(6, 7, 12), get(8, 9, 12), get(10, 11, 12)}
	rep := checkLinearizability(ops, truth, keys, 1, start, "", time.Minute)
	lines := rep.failing
	if rep.verdict != porcupine.Illegal || len(lines) != 4 || !strings.HasSuffix(lines[3], "get lin-00 -> @10") {
		t.Errorf("failing part %q, want the three operations up to the stale GET", lines)
	}

	// A consistent LIST below what etcd had committed at its call.
	l := list(8, 9, 11, 12)
	l.seen = 12
	if rep := checkLinearizability([]linOp{create(0, 1, 10), update(4, 5, 10, 12), l}, truth, keys, 1, start, "", time.Minute); rep.staleConsistent != 1 {
		t.Errorf("stale consistent reads %d, want 1", rep.staleConsistent)
	}
}

func TestStalenessOfRV0Reads(t *testing.T) {
	start := time.Unix(1000, 0)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	keys := newKeyTable()
	k0 := keys.id(linNamespace + "/" + linKeyName(0))
	truth := []truthEvent{
		{rev: 10, key: k0, typ: watch.Added, cur: &attrs{rv: 10}, at: at(100)},
		{rev: 12, key: k0, typ: watch.Modified, cur: &attrs{rv: 12}, prev: &attrs{rv: 10}, at: at(200)},
		{rev: 15, key: k0, typ: watch.Deleted, prev: &attrs{rv: 12}, at: at(300)},
	}
	read := func(kind linKind, call int, rv, listRV, seen uint64) linOp {
		return linOp{kind: kind, rv0: true, call: at(call), ret: at(call + 1), code: codeOK, rv: rv, listRV: listRV, seen: seen}
	}
	ops := []linOp{
		read(linGet, 250, 12, 0, 12),   // fresh
		read(linGet, 250, 10, 0, 12),   // behind by 2 revisions, since 200ms: 50ms
		read(linGet, 400, 0, 0, 15),    // absent, fresh
		read(linGet, 400, 12, 0, 15),   // behind by 3, since 300ms: 100ms
		read(linList, 400, 0, 10, 15),  // behind by 5, since 200ms: 200ms
		read(linList, 400, 0, 15, 15),  // fresh
		read(linGet, 150, 0, 0, 10),    // absent, created at 100ms: behind by 10 (since never), 50ms
		read(linGet, 50, 0, 0, 0),      // absent before anything: fresh
		read(linList, 350, 0, 16, 16),  // ahead of the history: fresh
		read(linGet, 250, 12, 0, 12),   // fresh again
		read(linList, 250, 0, 12, 12),  // fresh
		read(linList, 250, 0, 12, 13),  // RV behind (a revision of another key), no change of widgets missed: 1 revision, 0ms
		read(linGet, 1000, 12, 0, 16),  // behind by 3, 700ms
		read(linGet, 1000, 0, 0, 16),   // fresh
		read(linGet, 1000, 10, 0, 16),  // behind by 5, 800ms
		read(linList, 1000, 0, 16, 16), // fresh
	}
	rep := checkLinearizability(ops, truth, keys, 1, start, "", time.Minute)
	if rep.rv0Reads != len(ops) || rep.ops != 0 {
		t.Fatalf("rv0 reads %d, ops %d: want every read measured and none checked for linearizability", rep.rv0Reads, rep.ops)
	}
	if rep.rv0Stale != 6 {
		t.Errorf("%d stale, want 6", rep.rv0Stale)
	}
	if got, want := quantiles(rep.behindRevs, itoa), "0/10/10"; got != want {
		t.Errorf("revisions behind p50/p99/max %s, want %s (%v)", got, want, rep.behindRevs)
	}
	if got, want := quantiles(rep.behindTime, func(d time.Duration) string { return itoa(uint64(d.Milliseconds())) }), "0/800/800"; got != want {
		t.Errorf("ms behind p50/p99/max %s, want %s (%v)", got, want, rep.behindTime)
	}
}

func itoa(v uint64) string { return uintString(v) }

func TestErrorCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{apierrors.NewTooManyRequests("not ready", 1), "429"},
		{apierrors.NewTimeoutError("slow", 1), "504"},
		{&url.Error{Op: "Get", URL: "https://x", Err: context.DeadlineExceeded}, "timeout"},
		{&url.Error{Op: "Get", URL: "https://x", Err: http2.StreamError{StreamID: 1, Code: http2.ErrCodeInternal}}, "reset"},
		{&url.Error{Op: "Get", URL: "https://x", Err: io.ErrUnexpectedEOF}, "transport"},
	} {
		if got := errorCode(tc.err); got != tc.want {
			t.Errorf("errorCode(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}
