package cacher

import (
	"context"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"k8s.io/apiserver/pkg/storage"
)

// hangingRV is a storage whose current-revision read never answers, as
// with etcd down.
type hangingRV struct{ *fakeStorage }

func (hangingRV) GetCurrentResourceVersion(ctx context.Context) (uint64, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

// A WatchList with no resourceVersion needs etcd's current revision; when
// etcd does not answer it gets a 504 after the freshness timeout instead of
// hanging for the whole outage.
func TestWatchListGivesUpOnAStuckStorage(t *testing.T) {
	fs := newFakeStorage(100)
	c := newTestCacher(t, fs, func(cfg *Config) { cfg.Storage = hangingRV{fs} })
	c.waitReady(t)
	start := time.Now()
	w, err := c.Watch(context.Background(), "/pods/", storage.ListOptions{
		ResourceVersion: "", SendInitialEvents: ptr.To(true), Recursive: true, Predicate: everything(true),
	})
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	s := errorStatus(t, nextEvent(t, w))
	if s.Code != 504 || s.Details == nil || s.Details.RetryAfterSeconds != 1 {
		t.Errorf("status %d (%q), retry %+v; want 504 with Retry-After 1", s.Code, s.Message, s.Details)
	}
	if took := time.Since(start); took > freshnessTimeout+5*time.Second {
		t.Errorf("gave up after %v, want about %v", took, freshnessTimeout)
	}
}
