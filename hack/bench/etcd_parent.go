package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/watchkeeper/watchkeeper/internal/freeport"
)

// etcdProcess is the etcd child as the parent holds it.
type etcdProcess struct {
	cmd       *exec.Cmd
	stdin     io.WriteCloser
	exited    chan struct{}
	clientURL string
}

// startEtcd starts `bench etcd` on free loopback ports with a fresh data
// directory under workDir and waits until it serves.
func startEtcd(self, workDir, logDir string) (*etcdProcess, error) {
	ports, err := freeport.Ports(2)
	if err != nil {
		return nil, err
	}
	clientURL := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	dir := filepath.Join(workDir, "etcd")
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	logFile, err := os.Create(filepath.Join(logDir, "etcd.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "etcd", "--dir", dir, "--client-port", strconv.Itoa(ports[0]), "--peer-port", strconv.Itoa(ports[1]), "--exit-on-stdin-eof")
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting etcd: %w", err)
	}
	p := &etcdProcess{cmd: cmd, stdin: stdin, exited: make(chan struct{}), clientURL: clientURL}
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()

	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == etcdReadyLine {
				ready <- true
				_, _ = io.Copy(io.Discard, stdout)
				return
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if ok {
			return p, nil
		}
	case <-time.After(time.Minute):
	}
	p.stop()
	return nil, fmt.Errorf("etcd did not start; see %s", logFile.Name())
}

// stop asks etcd to shut down and kills it if it does not within 15s.
func (p *etcdProcess) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	_ = p.stdin.Close()
}
