package integration

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watchkeeper/watchkeeper/internal/testchild"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// hostileAbrupt* size TestHostileAbruptConnections: the issue asks for
// 10,000 watch connections, in bursts; here 10 bursts of 1,000 TCP
// connections (one HTTP/1.1 watch each) and 200 HTTP/2 streams. A burst's
// connections are all open at once (about 2,000 descriptors, client and
// server ends, both in this process), then dropped together. Under -race on
// two cores a burst takes about 3s and the test about 45s.
const (
	hostileAbruptBursts   = 10
	hostileAbruptPerBurst = 1000
	// hostileAbruptH2Streams more watches per burst ride on HTTP/2
	// connections (hostileStreamsPerConn each) whose TCP connection is cut
	// under them, the way a client behind a load balancer loses them.
	hostileAbruptH2Streams = 200
)

// How a connection is dropped. Every one is abrupt: the TCP connection
// ends with no TLS close_notify, and the HTTP exchange unfinished.
type hostileDrop int

const (
	// dropBeforeAnswer: the request is sent and the connection reset at
	// once, racing the server setting the watch up.
	dropBeforeAnswer hostileDrop = iota
	// dropResetUnread: the answer's headers are read, initial events are
	// left unread, and the connection is reset (RST, SO_LINGER 0).
	dropResetUnread
	// dropCloseUnread: the same, ended with a FIN.
	dropCloseUnread
	hostileDrops
)

// hostileSnapshot is what must return to baseline after a burst.
type hostileSnapshot struct {
	goroutines int
	heap       uint64 // live heap after a forced GC
	watchers   float64
	handlers   float64
}

func takeHostileSnapshot(t *testing.T) hostileSnapshot {
	t.Helper()
	// Twice: sync.Pools are emptied over two cycles.
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return hostileSnapshot{
		goroutines: runtime.NumGoroutine(),
		heap:       ms.HeapAlloc,
		watchers:   hostileWatchers(t),
		handlers:   hostileWatchHandlers(t),
	}
}

func (s hostileSnapshot) String() string {
	return fmt.Sprintf("goroutines %d, heap %s, cache watchers %v, watch handlers %v", s.goroutines, hostileMiB(s.heap), s.watchers, s.handlers)
}

// TestHostileAbruptConnections: watch connections opened and dropped
// abruptly, in bursts, leak nothing: after each burst and at the end, the
// process's goroutines and live heap return to their baseline, the cache
// holds no watcher for them and the apiserver serves no watch for them,
// within a bounded time.
//
// The server runs in this process, so runtime.NumGoroutine counts the
// test's goroutines too: the clients here keep none once a burst is
// dropped (raw connections are driven from the burst's own goroutines,
// which it waits for, and the HTTP/2 transports are closed), so what
// remains is the server's.
//
// Slack, and why it catches a leak: the goroutine count may exceed the
// baseline by 25 (the test's own pollers, and timers and connection
// goroutines of the process's long-lived clients, such as etcd's, coming
// and going); a leak of one goroutine per watch would be +1,200 a burst.
// The live heap may exceed it by 8MiB after a burst: allocator and pool
// caches (the http2 and TLS buffers, the encoders' pools) that a burst
// grows and later cycles give back, as GC timing varies between two
// snapshots (seen: up to +5MiB). A leaked watcher costs its channel, its
// cacheable objects and a goroutine stack (several KiB): 1KiB a watch is
// 1.2MiB a burst and 12MiB over the run, which the final check, against the
// same baseline with half the slack (4MiB; seen: +2MiB), sees.
//
// A watcher that ends stays referenced by the bookmark calendar until its
// slot comes round (the tick skips it then), so the heap comes back within
// one bookmark period; the server runs with a 1s frequency for a short
// wait. (With the default 1m, 1,200 dropped watches were seen to hold
// about 20MiB for that minute, through each watcher's request context:
// reported, not fixed here.)
func TestHostileAbruptConnections(t *testing.T) {
	t.Parallel() // in a process of its own: the process's goroutines and heap are what it checks
	if !testchild.Isolate(t) {
		return
	}
	const (
		ns      = "abrupt"
		objects = 10 // initial events each watch is sent (and does not read)
		// opening bounds the connections being set up at once.
		opening        = 48
		settleTimeout  = 30 * time.Second
		goroutineSlack = 25
		heapSlack      = 8 << 20
		warmUpWatches  = 100
		// calendarPeriod is the bookmark frequency and granularity the
		// server runs with.
		calendarPeriod = 2 * time.Second
	)
	// Bookmarks every second: see above.
	s := startSampleServer(t, append(hostileServerArgs(),
		"--watch-cache-bookmark-frequency=1s", "--watch-cache-bookmark-pre-deadline-offset=500ms")...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for i := range objects {
		if _, err := s.Client.DemoV1alpha1().Widgets(ns).Create(ctx, ssWidget(ns, fmt.Sprintf("w-%02d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tlsCfg := hostileTLS(t, s)
	// Resumed TLS sessions: a full handshake's RSA signature is most of a
	// connection's cost under -race, and no part of what is tested.
	tlsCfg.ClientSessionCache = tls.NewLRUClientSessionCache(64)
	path := hostileWatchPath(ns, "0", true)
	// base is the baseline every burst returns to; the burst's own check
	// of its watchers needs it before the first snapshot too.
	var base hostileSnapshot

	// burst opens n raw HTTP/1.1 watch connections and h2 more watches over
	// HTTP/2, holds them all open, then drops them; it returns how many
	// watchers the cache had at the peak.
	burst := func(n, h2 int) (peak float64, took time.Duration) {
		t.Helper()
		start := time.Now()
		conns := make([]*hostileRawConn, n)
		var wg sync.WaitGroup
		var failed atomic.Int64
		var firstErr atomic.Value
		sem := make(chan struct{}, opening)
		for i := range n {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				c, err := dialHostileRaw(ctx, s, tlsCfg, 0)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
					return
				}
				err = c.sendGet(s, path)
				if err == nil && hostileDrop(i%int(hostileDrops)) == dropBeforeAnswer {
					_ = c.raw.SetLinger(0)
					_ = c.raw.Close()
					return
				}
				if err == nil {
					var resp *http.Response
					if resp, err = c.readHeader(); err == nil && resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("watch answered %s", resp.Status)
					}
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
					_ = c.raw.Close()
					return
				}
				conns[i] = c
			})
		}
		// The HTTP/2 watches, on connections this test can cut.
		h2conns := make(chan net.Conn, h2/hostileStreamsPerConn+1)
		var h2wg sync.WaitGroup
		var transports []*http.Transport
		for j := 0; j < h2; j += hostileStreamsPerConn {
			tr := &http.Transport{
				TLSClientConfig:   tlsCfg.Clone(),
				ForceAttemptHTTP2: true,
				DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
					c, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, network, addr)
					if err != nil {
						return nil, err
					}
					cfg := tlsCfg.Clone()
					cfg.NextProtos = []string{"h2"}
					cfg.ServerName, _, _ = net.SplitHostPort(addr)
					tc := tls.Client(c, cfg)
					if err := tc.HandshakeContext(ctx); err != nil {
						c.Close()
						return nil, err
					}
					h2conns <- c
					return tc, nil
				},
			}
			transports = append(transports, tr)
			client := &http.Client{Transport: tr}
			resp := hostileGet(ctx, t, client, s, "/healthz") // one connection per transport
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			for range min(hostileStreamsPerConn, h2-j) {
				sem <- struct{}{}
				h2wg.Go(func() {
					req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+path, nil)
					if err != nil {
						<-sem
						failed.Add(1)
						return
					}
					req.Header.Set("Authorization", "Bearer "+s.Admin.BearerToken)
					req.Header.Set("Accept", "application/json")
					resp, err := client.Do(req)
					<-sem
					if err != nil || resp.StatusCode != http.StatusOK {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, fmt.Errorf("h2 watch: %v", err))
						if resp != nil {
							resp.Body.Close()
						}
						return
					}
					// Parked until the connection is cut under it.
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				})
			}
		}
		wg.Wait()
		held := 0
		for _, c := range conns {
			if c != nil {
				held++
			}
		}
		if f := failed.Load(); f > 0 {
			t.Fatalf("%d of %d watches failed to open: %v", f, n+h2, firstErr.Load())
		}
		// Every held watch registered: the cache sees them all at once.
		want := base.watchers + float64(held+h2)
		if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, settleTimeout, true, func(context.Context) (bool, error) {
			peak = hostileWatchers(t)
			return peak >= want, nil
		}); err != nil {
			t.Fatalf("cache watchers %v with the burst open, want %v (%v)", peak, want, err)
		}

		// Drop them all.
		for i, c := range conns {
			if c == nil {
				continue
			}
			if hostileDrop(i%int(hostileDrops)) == dropResetUnread {
				_ = c.raw.SetLinger(0)
			}
			_ = c.raw.Close()
		}
		close(h2conns)
		for c := range h2conns {
			_ = c.(*net.TCPConn).SetLinger(0)
			_ = c.Close()
		}
		h2wg.Wait()
		for _, tr := range transports {
			tr.CloseIdleConnections()
		}
		return peak, time.Since(start)
	}

	// Warm up, so lazily started goroutines and pools exist before the
	// baseline is taken.
	base.watchers = hostileWatchers(t)
	burst(warmUpWatches, hostileStreamsPerConn)
	waitHostile(t, settleTimeout, "the warm-up burst ends", func() (bool, string) {
		w := hostileWatchers(t)
		return w == base.watchers, fmt.Sprintf("watchers %v", w)
	})
	time.Sleep(time.Second)
	base = takeHostileSnapshot(t)
	t.Logf("baseline: %v", base)

	// settled waits until the burst's traces are gone.
	settled := func(what string) (hostileSnapshot, time.Duration) {
		t.Helper()
		start := time.Now()
		var last hostileSnapshot
		waitHostile(t, settleTimeout, what, func() (bool, string) {
			last = takeHostileSnapshot(t)
			ok := last.watchers == base.watchers && last.handlers == base.handlers &&
				last.goroutines <= base.goroutines+goroutineSlack && last.heap <= base.heap+heapSlack
			return ok, fmt.Sprintf("%v; baseline %v", last, base)
		})
		return last, time.Since(start)
	}
	total := 0
	for b := range hostileAbruptBursts {
		peak, took := burst(hostileAbruptPerBurst, hostileAbruptH2Streams)
		total += hostileAbruptPerBurst + hostileAbruptH2Streams
		after, settle := settled(fmt.Sprintf("burst %d returns to baseline", b+1))
		t.Logf("burst %d: %d watches (%d HTTP/1.1 connections, %d HTTP/2 streams) opened and dropped in %v, peak cache watchers %v; back to baseline in %v: %v",
			b+1, hostileAbruptPerBurst+hostileAbruptH2Streams, hostileAbruptPerBurst, hostileAbruptH2Streams, took.Round(time.Millisecond), peak, settle.Round(time.Millisecond), after)
	}
	// At the end, past the calendar's period, against the same baseline
	// with half the slack: a leak a burst hides in the slack adds up here.
	time.Sleep(calendarPeriod)
	end := takeHostileSnapshot(t)
	t.Logf("after %d watches: %v (baseline %v): goroutines %+d, heap %+.1fMiB",
		total, end, base, end.goroutines-base.goroutines, (float64(end.heap)-float64(base.heap))/(1<<20))
	if end.watchers != base.watchers || end.handlers != base.handlers || end.goroutines > base.goroutines+goroutineSlack || end.heap > base.heap+heapSlack/2 {
		t.Errorf("after %d watches: %v, want baseline %v within %d goroutines and %s of heap", total, end, base, goroutineSlack, hostileMiB(heapSlack/2))
	}
}
