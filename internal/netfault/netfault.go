// Package netfault is a userspace TCP proxy that fails the way a network
// does: the soak routes every link it wants to break (an apiserver to etcd,
// etcd member to member, clients to an apiserver) through one, and tells it
// to cut, slow or degrade the link and then to heal it.
//
// What a Proxy models, and how:
//
//   - Blackhole: packets vanish and nothing is reset. The proxy stops reading
//     from both sides and stops writing what it already read, so neither end
//     gets an error, an EOF or a reset: the peers' kernels keep their
//     connections up and the applications above notice only by their own
//     timeouts (gRPC and HTTP/2 keepalive pings, raft heartbeats, a cache's
//     silence check). A connection accepted while blackholed is held, not
//     dialed, until the link heals. On heal everything held flows again, in
//     order, as TCP's retransmissions would deliver it; an end closed
//     meanwhile is then seen closed.
//   - Latency: every chunk read is written no earlier than Latency after it
//     was read, one way (set the same on both directions' proxy, that is
//     the same Fault, for a round trip of 2*Latency).
//   - Bandwidth: each direction of each connection is paced to Bandwidth
//     bytes per second after the latency.
//   - Loss: a TCP proxy cannot drop bytes without corrupting the stream, and
//     TCP does not lose them either: it retransmits, in order. What a lost
//     segment costs a TCP connection is time: the segment is resent after a
//     retransmission timeout and everything behind it waits (head-of-line
//     blocking). So each segment (1448 bytes, an Ethernet MSS) of a chunk is
//     lost with probability Loss, and a chunk with a lost segment is held
//     one retransmission timeout longer (2*Latency + 200ms: the round trip,
//     plus Linux's minimum RTO variance) together with all that follows it.
//     Several losses in one chunk cost one timeout (selective ACKs recover
//     them together). What this does not model: congestion control's
//     shrinking window after a loss, and delayed or reordered ACKs.
//
// Faults apply to every connection of a proxy (Set) or only to those whose
// source a Classify function names (SetFrom): etcd's members dial each
// other, and cutting one member from the others needs the connections it
// dialed told apart from the ones its peers dialed. OwnerPID names the
// process that dialed an accepted loopback connection, for that.
package netfault

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Fault is what a link does to the traffic it carries; the zero Fault is a
// healthy link.
type Fault struct {
	// Blackhole forwards nothing and resets nothing, in both directions.
	Blackhole bool
	// Latency is added, one way, to every chunk.
	Latency time.Duration
	// Bandwidth limits each direction of each connection, in bytes per
	// second; 0 is unlimited.
	Bandwidth int64
	// Loss is the probability that a segment is lost and its stream stalls
	// for a retransmission timeout.
	Loss float64
}

func (f Fault) String() string {
	if f == (Fault{}) {
		return "healthy"
	}
	if f.Blackhole {
		return "blackhole"
	}
	s := ""
	if f.Latency > 0 {
		s += fmt.Sprintf("latency=%v ", f.Latency)
	}
	if f.Bandwidth > 0 {
		s += fmt.Sprintf("bandwidth=%dB/s ", f.Bandwidth)
	}
	if f.Loss > 0 {
		s += fmt.Sprintf("loss=%g ", f.Loss)
	}
	return s[:len(s)-1]
}

// segmentSize is the unit of loss: a TCP segment on Ethernet.
const segmentSize = 1448

// minRTOVariance is what Linux adds to the round trip for a retransmission
// timeout at the least (TCP_RTO_MIN).
const minRTOVariance = 200 * time.Millisecond

// retransmitAfter is how long a lost segment holds its stream.
func (f Fault) retransmitAfter() time.Duration { return 2*f.Latency + minRTOVariance }

// chunkLost reports whether a chunk of n bytes lost one of its segments.
func (f Fault) chunkLost(n int, r *rand.Rand) bool {
	if f.Loss <= 0 || n <= 0 {
		return false
	}
	segments := (n + segmentSize - 1) / segmentSize
	return r.Float64() < 1-math.Pow(1-f.Loss, float64(segments))
}

// Config says where a proxy listens and forwards.
type Config struct {
	// Listen is the address to listen on; "" is a free loopback port.
	Listen string
	// Target is the address connections are forwarded to (see SetTarget).
	Target string
	// Classify names the source of an accepted connection, for SetFrom; ""
	// when unknown. nil: every source is "".
	Classify func(net.Conn) string
	// Seed seeds the loss draws; 0 picks one.
	Seed uint64
	// DialTimeout bounds a dial of the target; 0 is 10 seconds. A failed
	// dial closes the accepted connection, as a refused one would.
	DialTimeout time.Duration
}

// Stats are a proxy's counters since it started.
type Stats struct {
	// Accepted connections, and those open now.
	Accepted, Open int64
	// Bytes forwarded, both directions together.
	Bytes int64
	// Stalls are chunks held for a retransmission timeout (Loss).
	Stalls int64
}

// Proxy forwards TCP connections from its listener to its target.
type Proxy struct {
	cfg Config
	ln  net.Listener

	mu      sync.Mutex
	target  string
	all     Fault
	from    map[string]Fault
	changed chan struct{} // closed and replaced on every change of a fault
	conns   map[*link]struct{}
	closed  bool

	done chan struct{}
	wg   sync.WaitGroup

	accepted, open, bytes, stalls atomic.Int64
	seed                          uint64
}

// New starts a proxy.
func New(cfg Config) (*Proxy, error) {
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		cfg:     cfg,
		ln:      ln,
		target:  cfg.Target,
		from:    map[string]Fault{},
		changed: make(chan struct{}),
		conns:   map[*link]struct{}{},
		done:    make(chan struct{}),
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	p.seed = seed
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the listening address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetTarget changes where new connections are forwarded (a server that
// restarted on another port); connections open now keep theirs.
func (p *Proxy) SetTarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}

// Set applies f to every connection, now and to come, except those whose
// source has a fault of its own (SetFrom).
func (p *Proxy) Set(f Fault) {
	p.mu.Lock()
	p.all = f
	p.notifyLocked()
	p.mu.Unlock()
}

// SetFrom applies f to the connections Classify names source.
func (p *Proxy) SetFrom(source string, f Fault) {
	p.mu.Lock()
	p.from[source] = f
	p.notifyLocked()
	p.mu.Unlock()
}

// Heal clears every fault.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.all = Fault{}
	clear(p.from)
	p.notifyLocked()
	p.mu.Unlock()
}

// Fault is the fault applied to connections from source.
func (p *Proxy) Fault(source string) Fault {
	f, _ := p.faultOf(source)
	return f
}

func (p *Proxy) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// faultOf is the fault for source and a channel closed when any fault
// changes.
func (p *Proxy) faultOf(source string) (Fault, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if f, ok := p.from[source]; ok {
		return f, p.changed
	}
	return p.all, p.changed
}

// Stats returns the counters.
func (p *Proxy) Stats() Stats {
	return Stats{Accepted: p.accepted.Load(), Open: p.open.Load(), Bytes: p.bytes.Load(), Stalls: p.stalls.Load()}
}

// CloseConns closes every open connection at once (both ends see it
// closed): what a crash of the machine in the middle does, unlike a
// blackhole.
func (p *Proxy) CloseConns() {
	p.mu.Lock()
	ls := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		ls = append(ls, l)
	}
	p.mu.Unlock()
	for _, l := range ls {
		l.close()
	}
}

// Close stops listening, closes every connection and waits until every
// goroutine of the proxy has returned.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return
	}
	p.closed = true
	close(p.done)
	p.mu.Unlock()
	_ = p.ln.Close()
	p.CloseConns()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		id := uint64(p.accepted.Add(1))
		source := ""
		if p.cfg.Classify != nil {
			source = p.cfg.Classify(c)
		}
		l := &link{p: p, id: id, source: source, client: c}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			return
		}
		p.conns[l] = struct{}{}
		p.mu.Unlock()
		p.open.Add(1)
		p.wg.Go(l.run)
	}
}

// waitPassable waits until source's link is not blackholed; false when the
// proxy or the link closed meanwhile.
func (p *Proxy) waitPassable(source string, linkDone <-chan struct{}) (Fault, bool) {
	for {
		f, changed := p.faultOf(source)
		if !f.Blackhole {
			return f, true
		}
		select {
		case <-changed:
		case <-p.done:
			return f, false
		case <-linkDone:
			return f, false
		}
	}
}

// link is one proxied connection.
type link struct {
	p      *Proxy
	id     uint64 // the proxy's count of accepted connections at its accept
	source string
	client net.Conn

	mu       sync.Mutex
	server   net.Conn
	done     chan struct{}
	doneOnce sync.Once
}

func (l *link) close() {
	l.doneOnce.Do(func() {
		l.mu.Lock()
		if l.done == nil {
			l.done = make(chan struct{})
		}
		close(l.done)
		server := l.server
		l.mu.Unlock()
		_ = l.client.Close()
		if server != nil {
			_ = server.Close()
		}
	})
}

func (l *link) doneCh() chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil {
		l.done = make(chan struct{})
	}
	return l.done
}

func (l *link) run() {
	p := l.p
	done := l.doneCh()
	defer func() {
		l.close()
		p.mu.Lock()
		delete(p.conns, l)
		p.mu.Unlock()
		p.open.Add(-1)
	}()
	// A link accepted while blackholed is held until it heals: the SYN of
	// a real client would go unanswered, its dial wait.
	if _, ok := p.waitPassable(l.source, done); !ok {
		return
	}
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	server, err := net.DialTimeout("tcp", target, p.cfg.DialTimeout)
	if err != nil {
		return // the client sees its connection closed, as if refused
	}
	l.mu.Lock()
	l.server = server
	l.mu.Unlock()
	select {
	case <-done: // closed while dialing
		_ = server.Close()
		return
	default:
	}
	var wg sync.WaitGroup
	wg.Go(func() { l.pipe(l.client, server, 2*l.id) })
	wg.Go(func() { l.pipe(server, l.client, 2*l.id+1) })
	wg.Wait()
}

// chunk is what one read got, and when it may be written.
type chunk struct {
	data []byte
	at   time.Time
	err  error // io.EOF: the source closed its side; other: broken
}

// queueDepth bounds the chunks read and not yet written, per direction.
const queueDepth = 16

const chunkSize = 32 << 10

// pipe copies src to dst through the link's fault: a reader that stamps
// each chunk with when it may be delivered, and a writer that delivers it
// then, paced. A half-close is passed on as a half-close; an error closes
// the link.
func (l *link) pipe(src, dst net.Conn, stream uint64) {
	p := l.p
	done := l.doneCh()
	r := rand.New(rand.NewPCG(p.seed, stream))
	queue := make(chan chunk, queueDepth)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(queue)
		var last time.Time // delivery times never go backwards: TCP is in order
		buf := make([]byte, chunkSize)
		for {
			f, ok := p.waitPassable(l.source, done)
			if !ok {
				return
			}
			n, err := src.Read(buf)
			if n > 0 {
				f = p.Fault(l.source) // what holds now, after a long read
				at := time.Now().Add(f.Latency)
				if f.chunkLost(n, r) {
					p.stalls.Add(1)
					at = at.Add(f.retransmitAfter())
				}
				if at.Before(last) {
					at = last
				}
				last = at
				select {
				case queue <- chunk{data: append([]byte(nil), buf[:n]...), at: at}:
				case <-done:
					return
				}
			}
			if err != nil {
				select {
				case queue <- chunk{err: err, at: last}:
				case <-done:
				}
				return
			}
		}
	})
	defer wg.Wait()
	var nextFree time.Time // pacing for Bandwidth
	for c := range queue {
		if !sleepUntil(c.at, done) {
			return
		}
		f, ok := p.waitPassable(l.source, done)
		if !ok {
			return
		}
		if c.err != nil {
			if errors.Is(c.err, io.EOF) {
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
					continue
				}
			}
			l.close()
			return
		}
		data := c.data
		for len(data) > 0 {
			n := len(data)
			if f.Bandwidth > 0 {
				// Pace in pieces of at most a tenth of a second's worth,
				// so a rate change or a blackhole takes hold soon.
				n = min(n, max(int(f.Bandwidth/10), 1))
				now := time.Now()
				if nextFree.Before(now) {
					nextFree = now
				}
				nextFree = nextFree.Add(time.Duration(float64(n) / float64(f.Bandwidth) * float64(time.Second)))
				if !sleepUntil(nextFree, done) {
					return
				}
			}
			w, err := dst.Write(data[:n])
			p.bytes.Add(int64(w))
			if err != nil {
				l.close()
				return
			}
			data = data[n:]
			if len(data) > 0 {
				if f, ok = p.waitPassable(l.source, done); !ok {
					return
				}
			}
		}
	}
	// The source closed and the queue drained: if the other direction is
	// over too, the link is done (run's deferred close).
}

// sleepUntil sleeps until t; false when done closed first.
func sleepUntil(t time.Time, done <-chan struct{}) bool {
	d := time.Until(t)
	if d <= 0 {
		select {
		case <-done:
			return false
		default:
			return true
		}
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-done:
		return false
	}
}
