package etcdlaunch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	etcderrors "go.etcd.io/etcd/server/v3/etcdserver/errors"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
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
