package kubecluster

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// Child is a process the driver runs: kube-apiserver, the sample
// apiserver, a controller. Its output goes to a log file in the run's
// directory.
type Child struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	exited  chan struct{}
	// WaitErr is how it exited, once Running is false.
	WaitErr error
	cpu     time.Duration
}

// StartChild starts path with args. The kernel kills the child if the driver
// dies without stopping it (Pdeathsig, which follows the OS thread that
// forked: that thread stays locked until the child is reaped).
func StartChild(name, logPath, path string, args ...string) (*Child, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child has its own descriptor
	fmt.Fprintf(logFile, "=== %s %s %s\n", time.Now().Format(time.RFC3339), path, strings.Join(args, " "))
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	c := &Child{Name: name, LogPath: logPath, cmd: cmd, exited: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: see above
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		c.WaitErr = cmd.Wait()
		if ps := cmd.ProcessState; ps != nil {
			c.cpu = ps.UserTime() + ps.SystemTime()
		}
		close(c.exited)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	return c, nil
}

// PID is the child's process id.
func (c *Child) PID() int { return c.cmd.Process.Pid }

// Exited is closed when the child has exited and been reaped.
func (c *Child) Exited() <-chan struct{} { return c.exited }

// CPU is the CPU time the child used in all, user and system, from the
// kernel's account at its reaping: the seconds of its last moments too,
// which /proc no longer shows. Zero until it has exited.
func (c *Child) CPU() time.Duration {
	select {
	case <-c.exited:
		return c.cpu
	default:
		return 0
	}
}

// Running is whether the child has not exited yet.
func (c *Child) Running() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// Stop sends SIGTERM, then SIGKILL after grace, and reaps the child.
func (c *Child) Stop(grace time.Duration) {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
		return
	case <-time.After(grace):
	}
	c.Kill()
}

// Kill ends the child at once (kill -9) and reaps it.
func (c *Child) Kill() {
	_ = c.cmd.Process.Kill()
	<-c.exited
}

// LogTail is the end of the child's log, for error messages.
func (c *Child) LogTail() string {
	data, err := os.ReadFile(c.LogPath)
	if err != nil {
		return err.Error()
	}
	const max = 3000
	if len(data) > max {
		data = data[len(data)-max:]
	}
	return string(data)
}

// RunDir makes a run's directory under the system's temporary directory,
// named prefix plus a random suffix; done removes it, or prints its path when
// keep is set.
func RunDir(prefix string, keep bool) (dir string, done func(), err error) {
	dir, err = os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, err
	}
	return dir, func() {
		if keep {
			fmt.Println("kept", dir)
		} else {
			os.RemoveAll(dir)
		}
	}, nil
}
