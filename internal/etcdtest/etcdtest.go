// Package etcdtest is the testing.TB face of package etcdlaunch for
// watchkeeper's tests: an embedded etcd member or cluster that fails the
// test instead of returning errors, logs through the test and is stopped
// when the test ends. Unlike upstream's testserver it can stop and restart
// a member on the same ports and data directory, which the fault tests need.
//
// Tests only: binaries use etcdlaunch.
package etcdtest

import (
	"fmt"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	storagetesting "k8s.io/apiserver/pkg/storage/testing"

	"github.com/watchkeeper/watchkeeper/internal/etcdlaunch"
)

// Etcd is one embedded etcd member with a data directory that outlives
// Stop, so Restart brings the same member back with its data.
type Etcd struct {
	t testing.TB
	*etcdlaunch.Member
}

// config is a test member's: no fsync (a test member is never kept across
// crashes), data in memory where the machine allows (DataDir), logs at
// error level through the test.
func config(t testing.TB, name string) etcdlaunch.Config {
	return etcdlaunch.Config{
		Name:    name,
		Dir:     DataDir(t),
		Logger:  testLogger(t),
		NoFsync: true,
	}
}

func testLogger(t testing.TB) *zap.Logger {
	return zaptest.NewLogger(t, zaptest.Level(zapcore.ErrorLevel))
}

// memoryDir is a tmpfs on Linux machines.
const memoryDir = "/dev/shm"

// DataDir returns a new directory for a test's etcd data (or a sample
// apiserver's, which holds its etcd's), removed when the test ends. It is in
// memory where the machine has a memoryDir: without fsync etcd still writes
// each change to its WAL and backend files, and on a disk busy with other
// work (a cold build beside make test) the page cache throttles those writes
// and a test's requests stalled past their deadlines. A test's data is
// thrown away anyway.
func DataDir(t testing.TB) string {
	t.Helper()
	if fi, err := os.Stat(memoryDir); err == nil && fi.IsDir() {
		if d, err := os.MkdirTemp(memoryDir, "watchkeeper-test-"); err == nil {
			t.Cleanup(func() {
				if err := os.RemoveAll(d); err != nil {
					t.Errorf("removing the test's data directory: %v", err)
				}
			})
			return d
		}
	}
	return t.TempDir()
}

// Start runs a single-member etcd on free loopback ports and a fresh data
// directory. It is stopped when the test ends.
func Start(t testing.TB) *Etcd {
	t.Helper()
	m, err := etcdlaunch.Start(config(t, "watchkeeper-test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	return &Etcd{t: t, Member: m}
}

// Client returns a new client of the member, closed when the test ends. It
// keeps working across Stop and Restart: it reconnects by itself.
func (e *Etcd) Client() *clientv3.Client {
	e.t.Helper()
	return newClient(e.t, e.Endpoints())
}

// Restart stops the member and starts it again on the same ports and data.
func (e *Etcd) Restart() {
	e.t.Helper()
	if err := e.Member.Restart(); err != nil {
		e.t.Fatal(err)
	}
}

// KubernetesClient returns a client of the member for an etcd3 store, its
// KV and Kubernetes interfaces wrapped in recorders as upstream's
// testserver.RunEtcd does (the conformance suite reads the recorder). It is
// closed when the test ends.
func (e *Etcd) KubernetesClient() *kubernetes.Client {
	e.t.Helper()
	c, err := kubernetes.New(clientv3.Config{
		Endpoints:   e.Endpoints(),
		DialTimeout: 10 * time.Second,
		Logger:      testLogger(e.t).Named("etcd-client"),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = c.Close() })
	recorder := storagetesting.NewKubernetesRecorder(c.Kubernetes)
	c.KV = storagetesting.NewKVRecorder(c.KV, recorder)
	c.Kubernetes = recorder
	return c
}

func newClient(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 10 * time.Second,
		Logger:      testLogger(t).Named("etcd-client"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Cluster is a multi-member etcd running in the test process. Each member
// is an *Etcd, so it stops and restarts as a single member does; the
// cluster adds what a fault test needs on top: all the endpoints, and who
// leads.
type Cluster struct {
	t testing.TB
	*etcdlaunch.Cluster
	Members []*Etcd
}

// StartCluster runs an n-member etcd cluster on free loopback ports and
// waits until every member is ready. It is stopped when the test ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	cfgs := make([]etcdlaunch.Config, n)
	for i := range n {
		name := fmt.Sprintf("member-%d", i)
		cfgs[i] = config(t, name)
		cfgs[i].Logger = cfgs[i].Logger.Named(name)
	}
	lc, err := etcdlaunch.StartCluster(cfgs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lc.Stop)
	c := &Cluster{t: t, Cluster: lc, Members: make([]*Etcd, n)}
	for i, m := range lc.Members {
		c.Members[i] = &Etcd{t: t, Member: m}
	}
	return c
}

// Client returns a new client of the whole cluster, closed when the test
// ends. It fails over between members by itself.
func (c *Cluster) Client() *clientv3.Client {
	c.t.Helper()
	return newClient(c.t, c.Endpoints())
}
