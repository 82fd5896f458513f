// Package childserver runs the sample apiserver as a child process and
// looks at it from outside: readiness, authenticated requests, /metrics
// and /proc. The HTTP benchmarks and the soak both drive their server
// through it, so their measurements of the server mean the same.
//
// It returns errors and never imports "testing", so binaries may use it.
package childserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/watchkeeper/watchkeeper/internal/childproc"
	"github.com/watchkeeper/watchkeeper/internal/freeport"
)

// Options says how to run the server.
type Options struct {
	// Command is the program and the arguments that make it the sample
	// apiserver: a built binary, or a binary of one's own with its serve
	// subcommand.
	Command []string
	// Args are the server's flags; Start adds --secure-port (a free port)
	// and --data-dir.
	Args []string
	// DataDir is the server's --data-dir; it writes its admin kubeconfig
	// there.
	DataDir string
	// LogPath receives the server's stdout and stderr.
	LogPath string
	// ReadyTimeout bounds the wait for /readyz; 0 means 2 minutes.
	ReadyTimeout time.Duration
	// StopGrace is how long Stop waits after SIGTERM before it kills the
	// server; 0 means 30 seconds.
	StopGrace time.Duration
}

// ErrAddrInUse is the error Start returns (wrapped) when the server exited
// because its free port had been taken in the meantime: a new attempt
// gets another.
var ErrAddrInUse = errors.New("secure port already in use")

// Process is the running server.
type Process struct {
	PID int
	// URL is where it serves, https://127.0.0.1:PORT.
	URL string
	// Admin carries the admin token and the serving CA from the kubeconfig
	// the server writes into its data dir; no client-side throttling.
	Admin *rest.Config
	// Token is the admin's bearer token, TLS the admin's TLS configuration.
	Token string
	TLS   *tls.Config
	// HTTP is for the odd request of one's own (Get): one connection.
	HTTP    *http.Client
	LogPath string

	opts     Options
	cmd      *exec.Cmd
	exited   chan struct{}
	waitErr  error
	stopOnce sync.Once
}

// Start starts the server and waits until /readyz passes. On any error the
// process is gone when it returns.
func Start(ctx context.Context, o Options) (_ *Process, err error) {
	if len(o.Command) == 0 {
		return nil, errors.New("childserver: no command")
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 2 * time.Minute
	}
	if o.StopGrace == 0 {
		o.StopGrace = 30 * time.Second
	}
	port, err := freeport.Port()
	if err != nil {
		return nil, err
	}
	logFile, err := os.Create(o.LogPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child has its own descriptor

	args := append(append(o.Command[1:len(o.Command):len(o.Command)], o.Args...),
		"--secure-port="+strconv.Itoa(port), "--data-dir="+o.DataDir)
	cmd := exec.Command(o.Command[0], args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	p := &Process{
		URL:     "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		LogPath: o.LogPath,
		opts:    o,
		cmd:     cmd,
		exited:  make(chan struct{}),
	}
	// If this process dies without stopping the server, the kernel kills
	// the server.
	if err := childproc.Start(cmd, func(err error) {
		p.waitErr = err
		close(p.exited)
	}); err != nil {
		return nil, fmt.Errorf("starting %s: %w", o.Command[0], err)
	}
	p.PID = cmd.Process.Pid
	if err := p.waitReady(ctx, filepath.Join(o.DataDir, "admin.kubeconfig")); err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}

// waitReady waits for the admin kubeconfig (written before the server
// binds) and then for /readyz, which passes once every watch cache synced.
func (p *Process) waitReady(ctx context.Context, kubeconfig string) error {
	deadline := time.Now().Add(p.opts.ReadyTimeout)
	var lastErr error
	for {
		select {
		case <-p.exited:
			if strings.Contains(p.LogTail(), "address already in use") {
				return fmt.Errorf("%w (log %s)", ErrAddrInUse, p.LogPath)
			}
			exit := p.waitErr
			if exit == nil {
				exit = errors.New("exit status 0")
			}
			return fmt.Errorf("sample apiserver exited before ready (%w); log %s:\n%s", exit, p.LogPath, p.LogTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if p.Admin == nil {
			if _, err := os.Stat(kubeconfig); err != nil {
				lastErr = err
			} else if err := p.loadAdmin(kubeconfig); err != nil {
				lastErr = err
			}
		}
		if p.Admin != nil {
			code, _, err := p.Get(ctx, "/readyz")
			if err == nil && code == http.StatusOK {
				return nil
			}
			if err != nil {
				lastErr = fmt.Errorf("/readyz: %w", err)
			} else {
				lastErr = fmt.Errorf("/readyz: %d", code)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sample apiserver not ready after %v: %w; log %s:\n%s", p.opts.ReadyTimeout, lastErr, p.LogPath, p.LogTail())
		}
	}
}

func (p *Process) loadAdmin(kubeconfig string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = -1, 0 // the callers set their own pace
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return err
	}
	if tlsCfg == nil {
		return fmt.Errorf("admin kubeconfig of %s has no TLS settings", p.URL)
	}
	p.Admin, p.Token, p.TLS = cfg, cfg.BearerToken, tlsCfg
	p.HTTP = &http.Client{Transport: NewTransport(tlsCfg), Timeout: 30 * time.Second}
	return nil
}

// NewTransport is a client transport to the server: HTTP/2 over tlsCfg,
// without compression.
func NewTransport(tlsCfg *tls.Config) *http.Transport {
	return &http.Transport{
		TLSClientConfig: tlsCfg.Clone(),
		// A custom TLS config turns HTTP/2 off unless forced.
		ForceAttemptHTTP2: true,
		// Otherwise Go asks for gzip and the apiserver gzips every flush of
		// every watch stream (perFlushGzipWriter): CPU on both sides that is
		// no part of the watch cache.
		DisableCompression:  true,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 2,
	}
}

// Get does a GET as the admin and returns the status and body.
func (p *Process) Get(ctx context.Context, path string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+path, nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+p.Token)
	resp, err := p.HTTP.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// Exited is closed once the process has exited and been reaped.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Stop ends the server: SIGTERM, then SIGKILL after the stop grace, and
// reaps it. Safe to call more than once and from several goroutines; every
// caller returns after the process is gone.
func (p *Process) Stop() {
	p.stopOnce.Do(func() {
		if p.HTTP != nil {
			p.HTTP.CloseIdleConnections()
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
			return
		case <-time.After(p.opts.StopGrace):
		}
		_ = p.cmd.Process.Kill()
		<-p.exited
	})
}

// Kill ends the server at once (SIGKILL, as kill -9 or a lost node does)
// and reaps it. Safe with Stop and more than once.
func (p *Process) Kill() {
	if p.HTTP != nil {
		p.HTTP.CloseIdleConnections()
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// LogTail is the end of the server's log, for error messages.
func (p *Process) LogTail() string {
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		return err.Error()
	}
	const max = 4000
	if len(data) > max {
		data = data[len(data)-max:]
	}
	return string(data)
}
