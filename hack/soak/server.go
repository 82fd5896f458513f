package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/cli"

	"github.com/watchkeeper/watchkeeper/internal/freeport"
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

const serverReadyTimeout = 2 * time.Minute

// serverProcess is the sample apiserver child.
type serverProcess struct {
	cmd    *exec.Cmd
	pid    int
	url    string
	admin  *rest.Config
	http   *http.Client
	log    string
	exited chan struct{}
	once   sync.Once
	err    error
}

func startServer(ctx context.Context, dir, etcdURL string, extra []string) (*serverProcess, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ports, err := freeport.Ports(1)
	if err != nil {
		return nil, err
	}
	dataDir := filepath.Join(dir, "server")
	logPath := filepath.Join(dir, "server.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	args := append([]string{serveCommand,
		"--etcd-servers=" + etcdURL,
		"--data-dir=" + dataDir,
		"--secure-port=" + strconv.Itoa(ports[0]),
		// The soak compacts etcd itself, on its own schedule, through the
		// key apiservers agree on compactions with; the server's compactor
		// (started, as with any interval but 0) then only learns of them.
		"--etcd-compaction-interval=24h",
		"--http2-max-streams-per-connection=1000",
		"-v=1",
	}, extra...)
	cmd := exec.Command(self, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// If the soak dies, the kernel kills the server: the signal follows the
	// thread that forked, hence the locked thread below.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	s := &serverProcess{cmd: cmd, log: logPath, url: fmt.Sprintf("https://127.0.0.1:%d", ports[0]), exited: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the child
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		s.err = cmd.Wait()
		close(s.exited)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("starting the sample apiserver: %w", err)
	}
	s.pid = cmd.Process.Pid
	if err := s.waitReady(ctx, filepath.Join(dataDir, "admin.kubeconfig")); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

func (s *serverProcess) waitReady(ctx context.Context, kubeconfig string) error {
	deadline := time.Now().Add(serverReadyTimeout)
	var last error
	for {
		select {
		case <-s.exited:
			return fmt.Errorf("sample apiserver exited before ready (%v); log %s", s.err, s.log)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if s.admin == nil {
			if cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
				last = err
			} else {
				cfg.QPS, cfg.Burst = -1, 0
				tr, err := rest.TransportFor(cfg)
				if err != nil {
					return err
				}
				s.admin, s.http = cfg, &http.Client{Transport: tr, Timeout: 30 * time.Second}
			}
		}
		if s.admin != nil {
			code, _, err := s.get(ctx, "/readyz")
			if err == nil && code == http.StatusOK {
				return nil
			}
			last = fmt.Errorf("/readyz: %d %v", code, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sample apiserver not ready after %v: %v; log %s", serverReadyTimeout, last, s.log)
		}
	}
}

func (s *serverProcess) get(ctx context.Context, path string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url+path, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// metric reads one unlabelled sample (go_goroutines, ...) off /metrics.
func (s *serverProcess) metric(ctx context.Context, name string) (float64, error) {
	code, body, err := s.get(ctx, "/metrics")
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("/metrics: %d", code)
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("/metrics has no %s", name)
}

// dumpGoroutines saves the server's goroutines (pprof, debug=1) to path,
// for whoever wants to know what the before and after counts are made of.
func (s *serverProcess) dumpGoroutines(ctx context.Context, path string) {
	if code, body, err := s.get(ctx, "/debug/pprof/goroutine?debug=1"); err == nil && code == http.StatusOK {
		_ = os.WriteFile(path, body, 0o600)
	}
}

// maxRSS is the server's peak resident set (VmHWM), in bytes.
func (s *serverProcess) maxRSS() (uint64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmHWM in /proc status")
}

// stop ends the server: SIGTERM, then SIGKILL after a grace period.
func (s *serverProcess) stop() {
	s.once.Do(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
			return
		case <-time.After(30 * time.Second):
		}
		_ = s.cmd.Process.Kill()
		<-s.exited
	})
}
