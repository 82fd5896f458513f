// Package childproc starts child processes that die with the process that
// started them: the one place that knows how Pdeathsig has to be used from
// Go. The soak's etcd members (internal/etcdproc) and the sample apiserver
// children (internal/childserver) start theirs with it.
package childproc

import (
	"os/exec"
	"runtime"
	"syscall"
)

// Start starts cmd so that the kernel kills it (SIGKILL) if this process
// dies without stopping it, and calls exited, on a goroutine of its own,
// with cmd.Wait's error once the child is reaped. It returns cmd.Start's
// error; exited is not called then.
//
// Pdeathsig follows the OS thread that forked, not the process: the
// goroutine that starts the child locks its thread and never unlocks it, so
// the thread lives until the child is reaped and the signal cannot fire
// early because Go retired the thread.
func Start(cmd *exec.Cmd, exited func(error)) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited(cmd.Wait())
	}()
	return <-started
}
