package etcdlaunch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	etcderrors "go.etcd.io/etcd/server/v3/etcdserver/errors"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"

	"github.com/watchkeeper/watchkeeper/internal/freeport"
)

func TestQuietStopDropsOnlyClosingErrorsDuringStop(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	var stopping atomic.Bool
	lg := zap.New(quietStop{core, &stopping})
	closed := &net.OpError{Op: "accept", Net: "tcp", Err: net.ErrClosed}

	lg.Error("setting up serving from embedded etcd failed.", zap.Error(closed))
	stopping.Store(true)
	lg.Error("setting up serving from embedded etcd failed.", zap.Error(closed))
	lg.Warn("stopping insecure grpc server due to error", zap.Error(closed))
	lg.Error("setting up serving from embedded etcd failed.", zap.Error(http.ErrServerClosed))
	lg.Error("setting up serving from embedded etcd failed.", zap.Error(errors.New("mux: server closed")))
	lg.Error("setting up serving from embedded etcd failed.", zap.Error(errors.New("mux: listener closed")))
	lg.Error("setting up serving from embedded etcd failed.", zap.Error(grpc.ErrServerStopped))
	lg.Warn("failed to update cluster version", zap.Error(etcderrors.ErrCanceled))
	lg.Warn("failed to update cluster version", zap.Error(context.Canceled))
	lg.With(zap.String("member", "m")).Error("serve", zap.Error(fmt.Errorf("serving: %w", closed)))
	lg.Error("setting up serving from embedded etcd failed.", zap.Error(errors.New("disk full")))
	lg.Info("below the level")
	stopping.Store(false)
	lg.Warn("stopped insecure grpc server due to error", zap.Error(closed))

	var got []string
	for _, e := range logs.All() {
		got = append(got, fmt.Sprintf("%s %s %v", e.Level, e.Message, e.ContextMap()["error"]))
	}
	want := []string{
		"error setting up serving from embedded etcd failed. accept tcp: use of closed network connection",
		"error setting up serving from embedded etcd failed. disk full",
		"warn stopped insecure grpc server due to error accept tcp: use of closed network connection",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("logged:\n%q\nwant:\n%q", got, want)
	}
}

// A member that has started and stops cleanly logs nothing at warning level
// or above about its stop (etcd's start-up warnings aside). It is stopped
// once its start-up work is done, as a server's member is: one stopped in
// its first milliseconds may also warn that it skipped start-up work.
func TestStopIsQuiet(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	m, err := Start(Config{Name: "quiet", Dir: t.TempDir(), Logger: zap.New(core), NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	for deadline := time.Now().Add(10 * time.Second); m.running.Server.ClusterVersion() == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the member has no cluster version after 10s")
		}
	}
	started := logs.Len()
	m.Stop()
	for _, e := range logs.All()[started:] {
		t.Errorf("on Stop: %s %q %v", e.Level, e.Message, e.ContextMap())
	}
}

// Another process may bind the ports Start picked before etcd does (the CI
// run of kube-e2e lost its second cluster to that): Start picks again.
func TestStartPicksAgainWhenAPickedPortWasTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	calls := 0
	pickPorts = func(n int) ([]int, error) {
		calls++
		ports, err := freeport.Ports(n)
		if calls == 1 && err == nil {
			ports[0] = taken.Addr().(*net.TCPAddr).Port
		}
		return ports, err
	}
	defer func() { pickPorts = freeport.Ports }()

	m, err := Start(Config{Name: "retry", Dir: t.TempDir(), NoFsync: true})
	if err != nil {
		t.Fatalf("Start: %v, want a member on other ports", err)
	}
	defer m.Stop()
	if calls != 2 {
		t.Errorf("picked ports %d times, want 2", calls)
	}
	if strings.HasSuffix(m.Endpoint(), ":"+strconv.Itoa(taken.Addr().(*net.TCPAddr).Port)) {
		t.Errorf("endpoint %s is the taken port", m.Endpoint())
	}
}

// Configured ports are the caller's: a taken one is an error, not a move.
func TestStartKeepsConfiguredPorts(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	ports, err := freeport.Ports(1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Start(Config{Name: "fixed", Dir: t.TempDir(), NoFsync: true,
		ClientPort: taken.Addr().(*net.TCPAddr).Port, PeerPort: ports[0]})
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("Start on a taken configured port: %v, want EADDRINUSE", err)
	}
}
