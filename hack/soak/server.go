package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"

	genericapiserver "k8s.io/apiserver/pkg/server"
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
	ctx := genericapiserver.SetupSignalContext()
	cmd := server.NewCommand(ctx, os.Stdout)
	cmd.SetArgs(args)
	return cli.Run(cmd)
}

// startServer starts the sample apiserver child on etcdURL, its data in
// dir/server and its log in dir/server.log, and waits until it is ready.
func startServer(ctx context.Context, dir, etcdURL string, extra []string) (*childserver.Process, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return childserver.Start(ctx, childserver.Options{
		Command: []string{self, serveCommand},
		Args: append([]string{
			"--etcd-servers=" + etcdURL,
			// The soak compacts etcd itself, on its own schedule, through the
			// key apiservers agree on compactions with; the server's
			// compactor (started, as with any interval but 0) then only
			// learns of them.
			"--etcd-compaction-interval=24h",
			"--http2-max-streams-per-connection=1000",
			"-v=1",
		}, extra...),
		DataDir: filepath.Join(dir, "server"),
		LogPath: filepath.Join(dir, "server.log"),
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

// dumpGoroutines saves the server's goroutines (pprof, debug=1) to path,
// for whoever wants to know what the before and after counts are made of.
func dumpGoroutines(ctx context.Context, srv *childserver.Process, path string) {
	if code, body, err := srv.Get(ctx, "/debug/pprof/goroutine?debug=1"); err == nil && code == http.StatusOK {
		_ = os.WriteFile(path, body, 0o600)
	}
}
