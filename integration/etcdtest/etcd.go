// Package etcdtest runs a real etcd inside the test process for watchkeeper's
// integration tests. Unlike upstream's testserver it can stop and restart the
// member on the same ports and data directory, which the fault tests need.
package etcdtest

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
)

const startTimeout = 60 * time.Second

// Etcd is one embedded etcd member with a data directory that outlives
// Stop, so Start brings the same member back with its data.
type Etcd struct {
	t   testing.TB
	cfg *embed.Config

	mu      sync.Mutex
	running *embed.Etcd
}

// portLock keeps two tests from picking the same free ports between closing
// the probe listeners and etcd binding them.
var portLock sync.Mutex

// Start runs a single-member etcd on free loopback ports and a fresh data
// directory. It is stopped when the test ends.
func Start(t testing.TB) *Etcd {
	t.Helper()
	portLock.Lock()
	defer portLock.Unlock()

	ports, err := FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	clientURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))}
	peerURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))}

	cfg := embed.NewConfig()
	cfg.Name = "watchkeeper-test"
	cfg.Dir = t.TempDir()
	// A test member is never kept across crashes, so fsync buys nothing.
	cfg.UnsafeNoFsync = true
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zaptest.NewLogger(t, zaptest.Level(zapcore.ErrorLevel)).Named("etcd"))

	e := &Etcd{t: t, cfg: cfg}
	if err := e.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Stop)
	return e
}

// Endpoints are the client URLs, for clients and storagebackend configs.
func (e *Etcd) Endpoints() []string {
	out := make([]string, len(e.cfg.AdvertiseClientUrls))
	for i, u := range e.cfg.AdvertiseClientUrls {
		out[i] = u.String()
	}
	return out
}

// Client returns a new client of the member, closed when the test ends. It
// keeps working across Stop and Start: it reconnects by itself.
func (e *Etcd) Client() *clientv3.Client {
	e.t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   e.Endpoints(),
		DialTimeout: 10 * time.Second,
		Logger:      zaptest.NewLogger(e.t, zaptest.Level(zapcore.ErrorLevel)).Named("etcd-client"),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}

// Stop shuts the member down and keeps its data. Stopping a stopped member
// does nothing.
func (e *Etcd) Stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.running != nil {
		e.running.Close()
		e.running = nil
	}
}

// Restart stops the member and starts it again on the same ports and data.
func (e *Etcd) Restart() {
	e.t.Helper()
	e.Stop()
	if err := e.start(); err != nil {
		e.t.Fatal(err)
	}
}

func (e *Etcd) start() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.running != nil {
		return nil
	}
	// On a restart the data directory already names the cluster, and etcd
	// ignores the initial-cluster settings.
	srv, err := embed.StartEtcd(e.cfg)
	if err != nil {
		return fmt.Errorf("starting embedded etcd: %w", err)
	}
	select {
	case <-srv.Server.ReadyNotify():
	case <-time.After(startTimeout):
		srv.Close()
		return fmt.Errorf("embedded etcd not ready after %v", startTimeout)
	}
	e.running = srv
	return nil
}

// FreePorts returns n distinct loopback TCP ports that were free when it
// returned: it holds all n probe listeners open at once, then closes them.
// Something else may bind a port before the caller does; within this
// package portLock keeps the tests' etcds from racing for them.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// freePorts is FreePorts under the name the package's other callers use.
func freePorts(n int) ([]int, error) { return FreePorts(n) }
