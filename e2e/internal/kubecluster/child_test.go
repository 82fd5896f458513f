package kubecluster

import (
	"path/filepath"
	"testing"
	"time"
)

// The old kube-apiserver's last seconds (its drain after SIGTERM) are gone
// from /proc by the time they end; the kernel's account at reaping keeps
// them.
func TestChildCPUIsTheKernelsAccountAtExit(t *testing.T) {
	c, err := StartChild("busy", filepath.Join(t.TempDir(), "busy.log"), "/bin/sh", "-c",
		"i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Exited():
	case <-time.After(time.Minute):
		c.Kill()
		t.Fatal("the busy child did not exit in a minute")
	}
	if c.WaitErr != nil {
		t.Fatalf("busy child: %v", c.WaitErr)
	}
	if c.CPU() <= 0 {
		t.Fatalf("CPU() = %v after a busy loop, want > 0", c.CPU())
	}
}
