package etcdtest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The member serves reads and writes, and a restart keeps its data and its
// revision, so tests of restarts see what a real restart looks like.
func TestRestartKeepsData(t *testing.T) {
	e := Start(t)
	c := e.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	put, err := c.Put(ctx, "/registry/k", "v1")
	if err != nil {
		t.Fatal(err)
	}
	e.Restart()
	got, err := c.Get(ctx, "/registry/k")
	if err != nil {
		t.Fatalf("get after restart: %v", err)
	}
	if len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "v1" {
		t.Fatalf("after restart got %v, want v1", got.Kvs)
	}
	if got.Header.Revision != put.Header.Revision {
		t.Fatalf("revision %d after restart, want %d", got.Header.Revision, put.Header.Revision)
	}
	e.Stop()
	e.Stop() // twice is fine
}

func TestDataDirInMemoryAndRemoved(t *testing.T) {
	var dir string
	t.Run("user", func(t *testing.T) {
		dir = DataDir(t)
		if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := os.Stat(memoryDir); err == nil && !strings.HasPrefix(dir, memoryDir+"/") {
		t.Errorf("data directory %s is not under %s, which this machine has", dir, memoryDir)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("data directory %s still there after its test ended (stat: %v)", dir, err)
	}
}
