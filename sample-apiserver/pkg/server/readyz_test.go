package server

import "testing"

func TestHealthPaths(t *testing.T) {
	for path, want := range map[string]bool{
		"/healthz": true, "/readyz": true, "/livez": true, "/readyz/watch-caches": true,
		"/healthzz": false, "/apis": false, "/": false, "/metrics": false,
	} {
		if got := isHealthPath(path); got != want {
			t.Errorf("isHealthPath(%q) = %v, want %v", path, got, want)
		}
	}
}
