package childproc

import (
	"errors"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// A started child is reaped and reported; one that cannot start is an error
// and no exit is reported.
func TestStart(t *testing.T) {
	cmd := exec.Command("sh", "-c", "exit 3")
	done := make(chan error, 1)
	if err := Start(cmd, func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	if cmd.SysProcAttr.Pdeathsig != syscall.SIGKILL {
		t.Errorf("Pdeathsig %v, want SIGKILL", cmd.SysProcAttr.Pdeathsig)
	}
	select {
	case err := <-done:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 3 {
			t.Errorf("exited with %v, want exit status 3", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the child's exit was not reported")
	}

	called := false
	if err := Start(exec.Command("/nonexistent/binary"), func(error) { called = true }); err == nil {
		t.Error("a binary that does not exist started")
	}
	if called {
		t.Error("exited was called for a child that never started")
	}
}
