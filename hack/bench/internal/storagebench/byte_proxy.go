package storagebench

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
)

// countingProxy is a loopback TCP proxy that counts the bytes it forwards
// each way. The prevkv scenario points the cache's storage at it, so that
// what the proxy forwards from the target is every byte the cache's etcd
// clients received from etcd (its list, its watch's events, progress
// notifications, gRPC and HTTP/2 framing and all), and nothing of the
// writes, which go to etcd on their own connection.
type countingProxy struct {
	ln     net.Listener
	target string
	// fromTarget are the bytes read from the target and written to the
	// clients; toTarget, the other way.
	fromTarget, toTarget atomic.Int64

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// startCountingProxy listens on a free loopback port and forwards each
// connection to target, host:port.
func startCountingProxy(target string) (*countingProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &countingProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// hostOf is a client URL's host:port (the etcd endpoint's), for the proxy's
// target.
func hostOf(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("etcd endpoint %q is not a URL with a host: %v", endpoint, err)
	}
	return u.Host, nil
}

// url is the proxy as a client URL.
func (p *countingProxy) url() string { return "http://" + p.ln.Addr().String() }

// received is how many bytes the clients got from the target so far.
func (p *countingProxy) received() int64 { return p.fromTarget.Load() }

// sent is how many bytes the clients sent the target so far.
func (p *countingProxy) sent() int64 { return p.toTarget.Load() }

func (p *countingProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			_ = c.Close()
			return
		}
		p.wg.Go(func() { p.forward(c) })
	}
}

// track adds c to the open connections, unless the proxy is closing.
func (p *countingProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *countingProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

// forward copies c to a new connection to the target and back, counting,
// until either side closes; then both are closed.
func (p *countingProxy) forward(c net.Conn) {
	defer p.untrack(c)
	t, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(t) {
		_ = t.Close()
		return
	}
	defer p.untrack(t)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn, n *atomic.Int64) {
		// An error (a reset, or the close below) ends the link as an EOF
		// does: the bytes are what counts here.
		_, _ = io.Copy(dst, &countingReader{r: src, n: n})
		// One side ended: end the other, as the proxied connection would.
		_ = c.Close()
		_ = t.Close()
		done <- struct{}{}
	}
	go pipe(c, t, &p.fromTarget)
	go pipe(t, c, &p.toTarget)
	<-done
	<-done
}

// close stops accepting, closes every connection and waits for the copies.
func (p *countingProxy) close() {
	p.mu.Lock()
	p.closed = true
	conns := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	_ = p.ln.Close()
	for _, c := range conns {
		_ = c.Close()
	}
	p.wg.Wait()
}

// countingReader counts what is read through it.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (r *countingReader) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	r.n.Add(int64(n))
	return n, err
}
