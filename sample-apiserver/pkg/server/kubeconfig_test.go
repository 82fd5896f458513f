package server

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// What start-up prints names the kubeconfig, never the token in it, and
// the kubeconfig is the owner's only, even when an earlier one was not.
func TestWriteKubeconfigKeepsTheTokenInTheFile(t *testing.T) {
	dir := t.TempDir()
	o := NewOptions()
	o.DataDir = dir
	cert := filepath.Join(dir, "apiserver.crt")
	if err := os.WriteFile(cert, []byte("-----BEGIN CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o.Recommended.SecureServing.ServerCert.CertKey.CertFile = cert
	path := filepath.Join(dir, "admin.kubeconfig")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	const token = "the-admin-token-0123456789"
	var out bytes.Buffer
	s := &Server{URL: "https://127.0.0.1:8443"}
	if err := s.writeKubeconfig(o, token, &out); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), token) {
		t.Errorf("the start-up message shows the token:\n%s", out.String())
	}
	if !strings.Contains(out.String(), path) {
		t.Errorf("the start-up message does not name %s:\n%s", path, out.String())
	}
	data, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(data), token) {
		t.Fatalf("the kubeconfig does not hold the token: %v", err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm != 0o600 {
		t.Errorf("the kubeconfig has mode %o, want 600", perm)
	}
}
