package httpbench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/watchkeeper/watchkeeper/internal/childserver"
)

const (
	// http2StreamsPerConnection is passed to the server explicitly, at the
	// apiserver's own default (k8s.io/apiserver secure_serving.go uses 100
	// when --http2-max-streams-per-connection is 0), so the client can size
	// its connection pool from the same number.
	http2StreamsPerConnection = 100

	readyTimeout = 90 * time.Second
	// stopGrace lets the server shut down cleanly before it is killed; the
	// measurements are taken by then, so a clean exit only matters for tidiness.
	stopGrace = 5 * time.Second
	// startAttempts covers the free port being taken by someone else between
	// our probe and the server's bind.
	startAttempts = 3
)

// serverProcess is one sample apiserver child process, serving on loopback
// against the shared etcd under its own prefix, with the scratch dir that
// holds its data and log.
type serverProcess struct {
	*childserver.Process
	dir  string // data dir and log, removed when the run succeeded
	keep bool   // leave dir in place after a clean stop
}

// startServer starts the sample apiserver and waits until /readyz passes.
// On any error the process is gone when it returns.
func startServer(ctx context.Context, env Env, scenario, decorator string) (*serverProcess, error) {
	if err := env.validate(); err != nil {
		return nil, err
	}
	if err := checkDecorator(decorator); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(env.WorkDir, 0o755); err != nil {
		return nil, err
	}
	var lastErr error
	for range startAttempts {
		s, err := startServerOnce(ctx, env, scenario, decorator)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if ctx.Err() != nil || !errors.Is(err, childserver.ErrAddrInUse) {
			break
		}
	}
	return nil, lastErr
}

func startServerOnce(ctx context.Context, env Env, scenario, decorator string) (*serverProcess, error) {
	dir, err := os.MkdirTemp(env.WorkDir, "httpbench-"+scenario+"-"+decorator+"-")
	if err != nil {
		return nil, err
	}
	// A fresh prefix per call: the etcd is shared by every run of the bench,
	// and a server must start with an empty keyspace and cold caches.
	prefix := fmt.Sprintf("/watchkeeper-bench/%s-%s-%d", scenario, decorator, time.Now().UnixNano())
	p, err := childserver.Start(ctx, childserver.Options{
		Command: []string{env.ServerBinary},
		Args: []string{
			"--etcd-servers=" + env.EtcdEndpoint,
			"--etcd-prefix=" + prefix,
			"--watch-cache-decorator=" + decorator,
			"--http2-max-streams-per-connection=" + strconv.Itoa(http2StreamsPerConnection),
			// Info logs are per server event, not per request, at -v=0; they
			// go to the log file so a failed start can be explained.
			"-v=0",
		},
		DataDir:      filepath.Join(dir, "data"),
		LogPath:      filepath.Join(dir, "server.log"),
		ReadyTimeout: readyTimeout,
		StopGrace:    stopGrace,
	})
	if err != nil {
		if errors.Is(err, childserver.ErrAddrInUse) {
			_ = os.RemoveAll(dir) // nothing to see: the next attempt has its own
		}
		return nil, err
	}
	go func() {
		select {
		case <-ctx.Done():
			p.Stop()
		case <-p.Exited():
		}
	}()
	return &serverProcess{Process: p, dir: dir}, nil
}

// cleanup removes the scratch dir of a run that went well; a failed run's
// dir stays, its log named in the error, and so does the dir of a run whose
// watches closed (keep).
func (s *serverProcess) cleanup() {
	if !s.keep {
		_ = os.RemoveAll(s.dir)
	}
}

// noteCloses keeps the run's dir, with the server log and why the watches
// closed: a result has room for the count only.
func (s *serverProcess) noteCloses(ws *watchSet) {
	if ws.closed.Load() == 0 {
		return
	}
	s.keep = true
	_ = os.WriteFile(filepath.Join(s.dir, "watch-closes.txt"),
		fmt.Appendf(nil, "%d watches closed while read: %s\n", ws.closed.Load(), ws.closeSummary()), 0o644)
}
