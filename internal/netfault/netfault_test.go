package netfault

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// echoServer echoes every connection until it closes its side; it counts
// the connections it accepted and tells when one saw its client's EOF.
type echoServer struct {
	ln       net.Listener
	accepted atomic.Int64
	eofs     chan struct{}
	wg       sync.WaitGroup
}

func newEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echoServer{ln: ln, eofs: make(chan struct{}, 16)}
	e.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.accepted.Add(1)
			e.wg.Go(func() {
				defer c.Close()
				if _, err := io.Copy(c, c); err == nil {
					e.eofs <- struct{}{}
				}
			})
		}
	})
	t.Cleanup(func() { ln.Close(); e.wg.Wait() })
	return e
}

// noLeaks checks, after every other cleanup of t, that no goroutine
// started since is left.
func noLeaks(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

func newProxy(t *testing.T, cfg Config) *Proxy {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func dial(t *testing.T, p *Proxy) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// roundTrip writes msg and reads it back, within 30 seconds.
func roundTrip(t *testing.T, c net.Conn, msg []byte) time.Duration {
	t.Helper()
	start := time.Now()
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("reading the echo: %v", err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatalf("echo %q, want %q", got[:min(len(got), 20)], msg[:min(len(msg), 20)])
	}
	return time.Since(start)
}

// silent asserts that nothing, not even an EOF or a reset, arrives on c for
// d: a read times out.
func silent(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	n, err := c.Read(make([]byte, 1))
	var ne net.Error
	if n != 0 || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read %d bytes, %v; want nothing until the deadline", n, err)
	}
}

func TestForwardsAndPassesHalfClose(t *testing.T) {
	noLeaks(t)
	e := newEcho(t)
	p := newProxy(t, Config{Target: e.ln.Addr().String()})
	c := dial(t, p)
	big := bytes.Repeat([]byte("0123456789abcdef"), 20000) // several chunks
	go func() { _, _ = c.Write(big) }()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	got := make([]byte, len(big))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("echo of %d bytes: %v, equal %v", len(big), err, bytes.Equal(got, big))
	}
	// The client's half-close reaches the server, whose close reaches the
	// client.
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.eofs:
	case <-time.After(30 * time.Second):
		t.Fatal("the server never saw the client's EOF")
	}
	if n, err := c.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("after the server closed: %d, %v; want EOF", n, err)
	}
	p.Close()
	if s := p.Stats(); s.Accepted != 1 || s.Open != 0 || s.Bytes != 2*int64(len(big)) {
		t.Errorf("stats %+v, want 1 accepted, 0 open, %d bytes", s, 2*len(big))
	}
}

func TestBlackholeHoldsEverythingWithoutResetUntilHealed(t *testing.T) {
	noLeaks(t)
	e := newEcho(t)
	p := newProxy(t, Config{Target: e.ln.Addr().String()})
	open := dial(t, p)
	roundTrip(t, open, []byte("before"))

	p.Set(Fault{Blackhole: true})
	if _, err := open.Write([]byte("during")); err != nil {
		t.Fatal(err)
	}
	silent(t, open, 500*time.Millisecond)
	// A connection made during the cut is accepted (the kernel does that)
	// and held: the proxy does not dial the server.
	late := dial(t, p)
	if _, err := late.Write([]byte("late")); err != nil {
		t.Fatal(err)
	}
	silent(t, late, 300*time.Millisecond)
	if n := e.accepted.Load(); n != 1 {
		t.Errorf("the server accepted %d connections during the cut, want only the first", n)
	}
	// A client that gives up and closes during the cut: its server side
	// hears nothing until the link heals.
	gone := dial(t, p)
	_ = gone.Close()
	select {
	case <-e.eofs:
		t.Fatal("a close crossed the blackhole")
	case <-time.After(300 * time.Millisecond):
	}

	p.Heal()
	_ = open.SetReadDeadline(time.Now().Add(30 * time.Second))
	got := make([]byte, len("during"))
	if _, err := io.ReadFull(open, got); err != nil || string(got) != "during" {
		t.Fatalf("after heal: %q, %v; want what was written during the cut", got, err)
	}
	_ = late.SetReadDeadline(time.Now().Add(30 * time.Second))
	got = make([]byte, len("late"))
	if _, err := io.ReadFull(late, got); err != nil || string(got) != "late" {
		t.Fatalf("the held connection after heal: %q, %v", got, err)
	}
	roundTrip(t, open, []byte("after"))
}

func TestLatencyDelaysEachWay(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, Config{Target: e.ln.Addr().String()})
	c := dial(t, p)
	roundTrip(t, c, []byte("warm"))
	const latency = 150 * time.Millisecond
	p.Set(Fault{Latency: latency})
	if d := roundTrip(t, c, []byte("x")); d < 2*latency {
		t.Errorf("round trip %v with %v each way, want at least %v", d, latency, 2*latency)
	}
	p.Heal()
	roundTrip(t, c, []byte("y"))
}

func TestBandwidthPaces(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, Config{Target: e.ln.Addr().String()})
	c := dial(t, p)
	const rate = 200 << 10 // 200KiB/s
	p.Set(Fault{Bandwidth: rate})
	msg := bytes.Repeat([]byte("b"), 100<<10)
	go func() { _, _ = c.Write(msg) }()
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadFull(c, make([]byte, len(msg))); err != nil {
		t.Fatal(err)
	}
	// 100KiB at 200KiB/s takes half a second each way; the two ways overlap.
	if d := time.Since(start); d < 450*time.Millisecond {
		t.Errorf("100KiB through a 200KiB/s link in %v, want at least 450ms", d)
	}
}

func TestLossStallsTheStreamForARetransmissionTimeout(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, Config{Target: e.ln.Addr().String(), Seed: 1})
	c := dial(t, p)
	roundTrip(t, c, []byte("warm"))
	if s := p.Stats(); s.Stalls != 0 {
		t.Fatalf("%d stalls on a healthy link", s.Stalls)
	}
	// Every segment lost: each way stalls once per chunk.
	p.Set(Fault{Loss: 1})
	if d := roundTrip(t, c, []byte("x")); d < 2*minRTOVariance {
		t.Errorf("round trip %v with every segment lost, want at least two timeouts (%v)", d, 2*minRTOVariance)
	}
	if s := p.Stats(); s.Stalls != 2 {
		t.Errorf("%d stalls, want 2 (one chunk each way)", s.Stalls)
	}
	// At 10% loss some of 100 single-segment chunks stall, not all.
	p.Set(Fault{Loss: 0.1})
	before := p.Stats().Stalls
	for i := range 100 {
		roundTrip(t, c, []byte(strconv.Itoa(i%10)))
	}
	if n := p.Stats().Stalls - before; n == 0 || n >= 200 {
		t.Errorf("%d stalls in 200 one-segment chunks at 10%% loss", n)
	}
}

func TestChunkLostScalesWithSegments(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	f := Fault{Loss: 0.01}
	rate := func(n int) float64 {
		lost := 0
		for range 20000 {
			if f.chunkLost(n, r) {
				lost++
			}
		}
		return float64(lost) / 20000
	}
	// 1% of one-segment chunks; 1-0.99^10 = 9.6% of ten-segment ones.
	if got := rate(segmentSize); got < 0.006 || got > 0.015 {
		t.Errorf("%.3f of one-segment chunks lost at 1%% loss", got)
	}
	if got := rate(10 * segmentSize); got < 0.07 || got > 0.12 {
		t.Errorf("%.3f of ten-segment chunks lost at 1%% loss, want about 0.096", got)
	}
	if (Fault{}).chunkLost(1<<20, r) {
		t.Error("a healthy link lost a chunk")
	}
}

func TestSetFromCutsOnlyThatSource(t *testing.T) {
	e := newEcho(t)
	self := os.Getpid()
	classify := func(c net.Conn) string {
		pid, err := OwnerPID(c, []int{self})
		if err != nil {
			return ""
		}
		return strconv.Itoa(pid)
	}
	p := newProxy(t, Config{Target: e.ln.Addr().String(), Classify: classify})
	c := dial(t, p)
	roundTrip(t, c, []byte("a"))
	p.SetFrom("someone-else", Fault{Blackhole: true})
	roundTrip(t, c, []byte("b"))
	p.SetFrom(strconv.Itoa(self), Fault{Blackhole: true})
	if _, err := c.Write([]byte("c")); err != nil {
		t.Fatal(err)
	}
	silent(t, c, 300*time.Millisecond)
	if f := p.Fault(strconv.Itoa(self)); !f.Blackhole {
		t.Errorf("fault of this process %v", f)
	}
	p.Heal()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
}

func TestOwnerPIDNamesTheDialer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if pid, err := OwnerPID(s, []int{os.Getppid(), os.Getpid()}); err != nil || pid != os.Getpid() {
		t.Errorf("OwnerPID = %d, %v; want this process, %d", pid, err, os.Getpid())
	}
	if _, err := OwnerPID(s, []int{os.Getppid()}); err == nil {
		t.Error("OwnerPID named a process that does not hold the socket")
	}
}

func TestCloseConnsAndCloseEndEverything(t *testing.T) {
	noLeaks(t)
	e := newEcho(t)
	p, err := New(Config{Target: e.ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	a := dial(t, p)
	roundTrip(t, a, []byte("a"))
	p.CloseConns()
	_ = a.SetReadDeadline(time.Now().Add(30 * time.Second))
	if n, err := a.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("after CloseConns: %d, %v; want the connection closed", n, err)
	}
	// A blackholed connection and a held one, then Close.
	b := dial(t, p)
	roundTrip(t, b, []byte("b"))
	p.Set(Fault{Blackhole: true, Latency: time.Second})
	dial(t, p)
	p.Close()
	if s := p.Stats(); s.Open != 0 {
		t.Errorf("%d connections open after Close", s.Open)
	}
}
