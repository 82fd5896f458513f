package etcdtest

import (
	"context"
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
