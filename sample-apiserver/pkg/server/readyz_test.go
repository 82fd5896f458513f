package server

import (
	"net/http"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/storage"
)

type readiness struct {
	storage.Interface
	err error
}

func (r readiness) ReadinessCheck() error { return r.err }

// /readyz fails until every resource's watch cache is ready, and says which.
func TestReadyzWaitsForEveryCache(t *testing.T) {
	req, _ := http.NewRequest(http.MethodGet, "/readyz", nil)
	c := &cacheSet{}
	if err := c.readyz().Check(req); err == nil {
		t.Fatal("ready before any cache exists")
	}
	c.stores = map[string]storage.Interface{
		"widgets.demo.watchkeeper.io": readiness{},
		"gadgets.demo.watchkeeper.io": readiness{err: storage.ErrStorageNotReady},
	}
	err := c.readyz().Check(req)
	if err == nil || !strings.Contains(err.Error(), "gadgets.demo.watchkeeper.io") || strings.Contains(err.Error(), "widgets") {
		t.Fatalf("with gadgets not ready: %v", err)
	}
	c.stores["gadgets.demo.watchkeeper.io"] = readiness{}
	if err := c.readyz().Check(req); err != nil {
		t.Fatalf("all ready: %v", err)
	}
}

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
