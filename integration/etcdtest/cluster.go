package etcdtest

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
)

// Cluster is a multi-member etcd running in the test process, every member
// on its own loopback ports and data directory. Each member is an *Etcd, so
// it stops and restarts as a single member does; the cluster adds what a
// fault test needs on top: all the endpoints, and who leads.
type Cluster struct {
	t       testing.TB
	Members []*Etcd
}

// StartCluster runs an n-member etcd cluster on free loopback ports and
// waits until every member is ready (which needs a quorum, hence all
// members start at once). It is stopped when the test ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("a cluster needs at least one member, not %d", n)
	}
	portLock.Lock()
	defer portLock.Unlock()

	ports, err := freePorts(2 * n)
	if err != nil {
		t.Fatal(err)
	}
	token := fmt.Sprintf("watchkeeper-test-%d", time.Now().UnixNano())
	cfgs := make([]*embed.Config, n)
	initial := make([]string, n)
	for i := range n {
		clientURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2*i]))}
		peerURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2*i+1]))}
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("member-%d", i)
		cfg.Dir = t.TempDir()
		cfg.UnsafeNoFsync = true
		cfg.ListenClientUrls = []url.URL{clientURL}
		cfg.AdvertiseClientUrls = []url.URL{clientURL}
		cfg.ListenPeerUrls = []url.URL{peerURL}
		cfg.AdvertisePeerUrls = []url.URL{peerURL}
		cfg.InitialClusterToken = token
		cfg.ClusterState = embed.ClusterStateFlagNew
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zaptest.NewLogger(t, zaptest.Level(zapcore.ErrorLevel)).Named("etcd-" + cfg.Name))
		cfgs[i] = cfg
		initial[i] = cfg.Name + "=" + peerURL.String()
	}
	c := &Cluster{t: t, Members: make([]*Etcd, n)}
	for i, cfg := range cfgs {
		cfg.InitialCluster = strings.Join(initial, ",")
		c.Members[i] = &Etcd{t: t, cfg: cfg}
	}

	// Every member waits for the others before it is ready: start them all
	// at once. The port lock is held until they have bound their ports.
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, m := range c.Members {
		wg.Go(func() { errs[i] = m.start() })
	}
	wg.Wait()
	t.Cleanup(c.Stop)
	for i, err := range errs {
		if err != nil {
			c.Stop()
			t.Fatalf("member %d: %v", i, err)
		}
	}
	return c
}

// Endpoints are every member's client URLs, for a client that fails over.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, m := range c.Members {
		out = append(out, m.Endpoints()...)
	}
	return out
}

// Client returns a new client of the whole cluster, closed when the test
// ends. It fails over between members by itself.
func (c *Cluster) Client() *clientv3.Client {
	c.t.Helper()
	cl, err := clientv3.New(clientv3.Config{
		Endpoints:   c.Endpoints(),
		DialTimeout: 10 * time.Second,
		Logger:      zaptest.NewLogger(c.t, zaptest.Level(zapcore.ErrorLevel)).Named("etcd-client"),
	})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// Stop stops every member, keeping their data.
func (c *Cluster) Stop() {
	var wg sync.WaitGroup
	for _, m := range c.Members {
		wg.Go(m.Stop)
	}
	wg.Wait()
}

// Leader is the index of the running member that is the leader, as that
// member sees it, or -1 when no running member leads.
func (c *Cluster) Leader() int {
	for i, m := range c.Members {
		if m.IsLeader() {
			return i
		}
	}
	return -1
}

// WaitLeader waits up to d until one running member leads and every
// running member agrees on it, and returns its index.
func (c *Cluster) WaitLeader(d time.Duration) (int, error) {
	deadline := time.Now().Add(d)
	for {
		if i := c.agreedLeader(); i >= 0 {
			return i, nil
		}
		if time.Now().After(deadline) {
			return -1, fmt.Errorf("no leader that every running member agrees on after %v", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *Cluster) agreedLeader() int {
	leader := -1
	var lead uint64
	for i, m := range c.Members {
		id, l, ok := m.raftIDs()
		if !ok {
			continue
		}
		if l == 0 || (lead != 0 && l != lead) {
			return -1
		}
		lead = l
		if id == l {
			leader = i
		}
	}
	return leader
}

// Running reports whether the member is started.
func (e *Etcd) Running() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.running != nil
}

// IsLeader reports whether the member runs and sees itself as the leader.
func (e *Etcd) IsLeader() bool {
	id, lead, ok := e.raftIDs()
	return ok && lead != 0 && id == lead
}

// raftIDs are the member's own ID and the leader it knows of (0: none).
func (e *Etcd) raftIDs() (id, lead uint64, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.running == nil {
		return 0, 0, false
	}
	s := e.running.Server
	return uint64(s.MemberID()), uint64(s.Leader()), true
}

// Kill stops the member abruptly: raft stops at once, without handing
// leadership over, so a leader's peers must notice its loss and elect
// another. Its client connections are cut only when etcd's shutdown stops
// waiting for open gRPC streams (its request timeout, about 7s, which Kill
// waits for): until then a client watching through this member hears
// nothing, as from a frozen member. Its data is kept and Restart brings it
// back. Killing a stopped member does nothing.
func (e *Etcd) Kill() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.running != nil {
		e.running.Server.HardStop()
		e.running.Close()
		e.running = nil
	}
}
