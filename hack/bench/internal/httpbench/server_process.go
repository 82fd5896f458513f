package httpbench

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
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
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
// against the shared etcd under its own prefix.
type serverProcess struct {
	cmd     *exec.Cmd
	pid     int
	dir     string // data dir and log, removed when the run succeeded
	logPath string
	url     string
	// admin carries the admin token and the serving CA from the kubeconfig
	// the server writes into its data dir.
	admin *rest.Config
	// http is for the odd request of our own (readyz, metrics); watches get
	// their own transports (watch_client.go).
	http  *http.Client
	token string

	keep     bool // leave dir in place after a clean stop
	exited   chan struct{}
	waitErr  error
	stopOnce sync.Once
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
		if ctx.Err() != nil || !errors.Is(err, errAddrInUse) {
			break
		}
	}
	return nil, lastErr
}

var errAddrInUse = errors.New("secure port already in use")

func startServerOnce(ctx context.Context, env Env, scenario, decorator string) (_ *serverProcess, err error) {
	dir, err := os.MkdirTemp(env.WorkDir, "httpbench-"+scenario+"-"+decorator+"-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "server.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child has its own descriptor

	// A fresh prefix per call: the etcd is shared by every run of the bench,
	// and a server must start with an empty keyspace and cold caches.
	prefix := fmt.Sprintf("/watchkeeper-bench/%s-%s-%d", scenario, decorator, time.Now().UnixNano())
	dataDir := filepath.Join(dir, "data")
	args := []string{
		"--etcd-servers=" + env.EtcdEndpoint,
		"--etcd-prefix=" + prefix,
		"--watch-cache-decorator=" + decorator,
		"--secure-port=" + strconv.Itoa(port),
		"--data-dir=" + dataDir,
		"--http2-max-streams-per-connection=" + strconv.Itoa(http2StreamsPerConnection),
		// Info logs are per server event, not per request, at -v=0; they go
		// to the log file so a failed start can be explained.
		"-v=0",
	}
	cmd := exec.Command(env.ServerBinary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// If this process dies without stopping the server (the driver killed
	// us), the kernel kills the server. The signal follows the OS thread
	// that forked, hence the locked thread below.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}

	s := &serverProcess{
		cmd:     cmd,
		dir:     dir,
		logPath: logPath,
		url:     "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		exited:  make(chan struct{}),
	}
	started := make(chan error, 1)
	go func() {
		// Never unlocked: the thread lives until the child is reaped and
		// exits with this goroutine, so Pdeathsig cannot fire early.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		s.waitErr = cmd.Wait()
		close(s.exited)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("starting %s: %w", env.ServerBinary, err)
	}
	s.pid = cmd.Process.Pid
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	go func() {
		select {
		case <-ctx.Done():
			s.stop()
		case <-s.exited:
		}
	}()

	if err := s.waitReady(ctx, filepath.Join(dataDir, "admin.kubeconfig")); err != nil {
		return nil, err
	}
	return s, nil
}

// waitReady waits for the admin kubeconfig (written before the server
// binds) and then for /readyz, which passes once every watch cache synced.
func (s *serverProcess) waitReady(ctx context.Context, kubeconfig string) error {
	deadline := time.Now().Add(readyTimeout)
	var lastErr error
	for {
		select {
		case <-s.exited:
			if strings.Contains(s.logTail(), "address already in use") {
				_ = os.RemoveAll(s.dir) // nothing to see: the next attempt has its own
				return errAddrInUse
			}
			return fmt.Errorf("sample apiserver exited before ready (%v); log %s:\n%s", s.waitErr, s.logPath, s.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if s.admin == nil {
			if _, err := os.Stat(kubeconfig); err != nil {
				lastErr = err
			} else if err := s.loadAdmin(kubeconfig); err != nil {
				lastErr = err
			}
		}
		if s.admin != nil {
			code, _, err := s.get(ctx, "/readyz")
			if err == nil && code == http.StatusOK {
				return nil
			}
			lastErr = fmt.Errorf("/readyz: %d %v", code, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sample apiserver not ready after %v: %v; log %s:\n%s", readyTimeout, lastErr, s.logPath, s.logTail())
		}
	}
}

func (s *serverProcess) loadAdmin(kubeconfig string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = -1, 0 // the bench sets its own pace
	tlsCfg, err := s.tlsConfigFor(cfg)
	if err != nil {
		return err
	}
	s.admin, s.token = cfg, cfg.BearerToken
	s.http = &http.Client{
		Transport: newTransport(tlsCfg),
		Timeout:   30 * time.Second,
	}
	return nil
}

func (s *serverProcess) tlsConfigFor(cfg *rest.Config) (*tls.Config, error) {
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, err
	}
	if tlsCfg == nil {
		return nil, fmt.Errorf("admin kubeconfig of %s has no TLS settings", s.url)
	}
	return tlsCfg, nil
}

// get does an authenticated GET and returns the status and body.
func (s *serverProcess) get(ctx context.Context, path string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url+path, nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := s.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// stop ends the server: SIGTERM, then SIGKILL after stopGrace, and reaps
// it. Safe to call more than once and from several goroutines; every caller
// returns after the process is gone.
func (s *serverProcess) stop() {
	s.stopOnce.Do(func() {
		if s.http != nil {
			s.http.CloseIdleConnections()
		}
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
			return
		case <-time.After(stopGrace):
		}
		_ = s.cmd.Process.Kill()
		<-s.exited
	})
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

func (s *serverProcess) logTail() string {
	data, err := os.ReadFile(s.logPath)
	if err != nil {
		return err.Error()
	}
	const max = 4000
	if len(data) > max {
		data = data[len(data)-max:]
	}
	return string(data)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
