package kubecluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A kube-apiserver that exits because its port was bound first is started
// again on another port, a bounded number of times; the etcd under it stays.
func TestStartServerPicksAnotherPortWhenKubeAPIServerCannotBind(t *testing.T) {
	dir := t.TempDir()
	pki, err := NewPKI(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Stands in for a kube-apiserver whose port another process took.
	fake := filepath.Join(dir, "fake-kube-apiserver")
	script := "#!/bin/sh\necho 'E run.go:72] \"command failed\" err=\"failed to listen on 127.0.0.1:1: listen tcp 127.0.0.1:1: bind: address already in use\"'\nexit 1\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = StartServer(context.Background(), dir, pki, ServerConfig{Name: "taken", Binary: fake, Decorator: "watchkeeper"})
	if !errors.Is(err, errPortTaken) {
		t.Fatalf("StartServer: %v, want errPortTaken after the last attempt", err)
	}
	log, err := os.ReadFile(filepath.Join(dir, "taken.log"))
	if err != nil {
		t.Fatal(err)
	}
	var ports []string
	for _, line := range strings.Split(string(log), "\n") {
		if strings.HasPrefix(line, "=== ") {
			for _, f := range strings.Fields(line) {
				if strings.HasPrefix(f, "--secure-port=") {
					ports = append(ports, f)
				}
			}
		}
	}
	if len(ports) != portAttempts {
		t.Errorf("kube-apiserver started %d times (%v), want %d", len(ports), ports, portAttempts)
	}
}
