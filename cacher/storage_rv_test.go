package cacher

import (
	"context"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/storage"
	"k8s.io/utils/ptr"
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
	// The read is bounded by a real timer (freshnessTimeout): a Watch that
	// hangs on the read never returns, and one that returns only after
	// ten times the bound is as good as hung.
	done := watchAsync(c, "/pods/", storage.ListOptions{
		ResourceVersion: "", SendInitialEvents: ptr.To(true), Recursive: true, Predicate: everything(true),
	})
	var r watchResult
	select {
	case r = <-done:
	case <-time.After(10 * freshnessTimeout):
		t.Fatalf("Watch still waits on a storage that never answers after %v", 10*freshnessTimeout)
	}
	if r.err != nil {
		t.Fatalf("Watch: %v", r.err)
	}
	t.Logf("gave up after %v (bound %v)", time.Since(start).Round(time.Millisecond), freshnessTimeout)
	s := errorStatus(t, nextEvent(t, r.w))
	if s.Code != 504 || s.Details == nil || s.Details.RetryAfterSeconds != 1 {
		t.Errorf("status %d (%q), retry %+v; want 504 with Retry-After 1", s.Code, s.Message, s.Details)
	}
}
