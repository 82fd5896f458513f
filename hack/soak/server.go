package main

import (
	"context"
	"net/http"
	"os"
	"strings"
	"time"

	"k8s.io/apiserver/pkg/server/signals"
	"k8s.io/component-base/cli"

	"github.com/watchkeeper/watchkeeper/internal/childserver"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/server"
)

// serveCommand is the argument that turns this program into the sample
// apiserver: the soak runs the server as a child process of its own binary,
// so its memory and goroutines are the server's alone, and it outlives
// etcd's restarts as a real server would.
const serveCommand = "serve"

// serve runs the sample apiserver exactly as its own main does.
func serve(args []string) int {
	ctx := signals.SetupSignalContext()
	cmd := server.NewCommand(ctx, os.Stdout)
	cmd.SetArgs(args)
	return cli.Run(cmd)
}

// startServer starts a sample apiserver child on the etcd endpoints, its
// data in dataDir and its log in logPath, and waits until it is ready.
func startServer(ctx context.Context, dataDir, logPath string, etcd []string, extra []string) (*childserver.Process, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return childserver.Start(ctx, childserver.Options{
		Command: []string{self, serveCommand},
		Args: append([]string{
			"--etcd-servers=" + strings.Join(etcd, ","),
			// The soak compacts etcd itself, on its own schedule, through the
			// key apiservers agree on compactions with; the server's
			// compactor (started, as with any interval but 0) then only
			// learns of them.
			"--etcd-compaction-interval=24h",
			"--http2-max-streams-per-connection=1000",
			"-v=1",
		}, extra...),
		DataDir: dataDir,
		LogPath: logPath,
		// A replica told to stop is given the HTTP server's whole 60s
		// shutdown timeout and more: its stop time is a figure of the soak.
		StopGrace: 90 * time.Second,
	})
}

// goroutines reads go_goroutines off the server's /metrics.
func goroutines(ctx context.Context, srv *childserver.Process) (float64, error) {
	m, err := srv.Metrics(ctx, "go_goroutines")
	if err != nil {
		return 0, err
	}
	return m[0], nil
}

// allGoroutines is go_goroutines summed over the replicas running.
func allGoroutines(ctx context.Context, set *replicaSet) (float64, error) {
	var sum float64
	for _, r := range set.rs {
		if p := r.process(); p != nil {
			n, err := goroutines(ctx, p)
			if err != nil {
				return 0, err
			}
			sum += n
		}
	}
	return sum, nil
}

// dumpGoroutines saves the server's goroutines (pprof, debug=1) to path,
// for whoever wants to know what the before and after counts are made of.
func dumpGoroutines(ctx context.Context, srv *childserver.Process, path string) {
	if code, body, err := srv.Get(ctx, "/debug/pprof/goroutine?debug=1"); err == nil && code == http.StatusOK {
		_ = os.WriteFile(path, body, 0o600)
	}
}
