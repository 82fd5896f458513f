package etcdproc

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

const childArg = "etcdproc-test-child"

// The test binary is its own child: with childArg first it runs Main.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == childArg {
		os.Exit(Main(os.Args[2:]))
	}
	os.Exit(m.Run())
}

func TestClusterOfProcessesSurvivesKillsAndReportsCrashes(t *testing.T) {
	dir := t.TempDir()
	specs := make([]Spec, 3)
	for i := range specs {
		specs[i] = Spec{
			Name:    fmt.Sprintf("m%d", i),
			Dir:     filepath.Join(dir, fmt.Sprintf("m%d", i)),
			LogPath: filepath.Join(dir, fmt.Sprintf("m%d.log", i)),
			NoFsync: true,
		}
	}
	c, err := NewCluster([]string{os.Args[0], childArg}, specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	crashed := make(chan int, 3)
	for i, m := range c.Members {
		m.OnExit = func(*Member, error) { crashed <- i }
	}
	if err := c.StartAll(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	ctx := context.Background()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	// A put retries for a minute: an election on a loaded machine may
	// time a request out (etcd's own request timeout, about 7s).
	put := func(v string) {
		t.Helper()
		var err error
		for start := time.Now(); time.Since(start) < time.Minute; {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err = cli.Put(ctx, "k", v)
			cancel()
			if err == nil {
				return
			}
		}
		t.Fatalf("put %s: %v", v, err)
	}
	put("1")
	lead, err := c.WaitLeader(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	pids := c.PIDs()
	if len(pids) != 3 || pids[0] == os.Getpid() {
		t.Fatalf("pids %v: want three children", pids)
	}

	// A requested kill is no crash; the others elect a leader and serve.
	c.Members[lead].Kill()
	if c.Members[lead].Running() {
		t.Fatal("killed member still running")
	}
	put("2")
	if _, err := c.WaitLeader(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.Members[lead].Start(); err != nil {
		t.Fatal(err)
	}
	// An exit nobody asked for is a crash, reported and counted.
	victim := (lead + 1) % 3
	if err := syscall.Kill(c.Members[victim].PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case i := <-crashed:
		if i != victim {
			t.Errorf("crash reported for member %d, want %d", i, victim)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no crash reported")
	}
	if n := c.Members[victim].Crashes(); n != 1 {
		t.Errorf("%d crashes counted, want 1", n)
	}
	for i, m := range c.Members {
		if i != victim && m.Crashes() != 0 {
			t.Errorf("member %d: %d crashes, want 0", i, m.Crashes())
		}
	}
	if err := c.Members[victim].Start(); err != nil {
		t.Fatal(err)
	}
	put("3")
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := cli.Get(rctx, "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "3" {
		t.Fatalf("get after the restarts: %v, %v", resp, err)
	}
}
