package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// child is a server the driver runs: kube-apiserver or the sample
// apiserver. Its output goes to a log file in the run's directory.
type child struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
}

// startChild starts path with args. The kernel kills the child if the driver
// dies without stopping it (Pdeathsig, which follows the OS thread that
// forked: that thread stays locked until the child is reaped).
func startChild(name, logPath, path string, args ...string) (*child, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child has its own descriptor
	fmt.Fprintf(logFile, "=== %s %s %s\n", time.Now().Format(time.RFC3339), path, strings.Join(args, " "))
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	c := &child{name: name, logPath: logPath, cmd: cmd, exited: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: see above
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		c.waitErr = cmd.Wait()
		close(c.exited)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

func (c *child) running() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM, then SIGKILL after grace, and reaps the child.
func (c *child) stop(grace time.Duration) {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
		return
	case <-time.After(grace):
	}
	c.kill()
}

// kill ends the child at once (kill -9) and reaps it.
func (c *child) kill() {
	_ = c.cmd.Process.Kill()
	<-c.exited
}

// logTail is the end of the child's log, for error messages.
func (c *child) logTail() string {
	data, err := os.ReadFile(c.logPath)
	if err != nil {
		return err.Error()
	}
	const max = 3000
	if len(data) > max {
		data = data[len(data)-max:]
	}
	return string(data)
}
