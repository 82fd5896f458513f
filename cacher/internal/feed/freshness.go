package feed

// Freshness: how a read or a watch waits for the cache to reach the
// resourceVersion it needs (waitFresh), how it learns etcd's current one
// (storageRV), and the fresh-bookmark probe; the progress requests that
// move a quiet resource's RV without a write are progress_requester.go's.

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/metadata"
	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/utils/clock"
)

// FreshnessTimeout is how long a read or watch waits for the cache to
// reach a resourceVersion before it gives up (upstream: 3s).
const FreshnessTimeout = 3 * time.Second

// ConsistentRV is etcd's current revision: what a consistent read must see.
func (f *Feed) ConsistentRV(ctx context.Context) (uint64, error) {
	rv, err := f.StorageRV(ctx)
	if err != nil {
		f.logger.V(2).Info("Consistent read falls back to storage", "err", err)
	}
	return rv, err
}

// StorageRV asks the storage for etcd's current revision, for at most
// freshnessTimeout: with etcd down the call would otherwise hang a watch or a
// consistent read for as long as the outage lasts. Giving up is a 504 the
// client retries.
func (f *Feed) StorageRV(ctx context.Context) (uint64, error) {
	bounded, cancel := context.WithTimeout(ctx, FreshnessTimeout)
	defer cancel()
	rv, err := f.storage.GetCurrentResourceVersion(bounded)
	if err != nil && ctx.Err() == nil && bounded.Err() != nil {
		return 0, errors.NewTimeoutError(fmt.Sprintf("reading the current resourceVersion of %v took longer than %v", f.cfg.GroupResource, FreshnessTimeout), 1)
	}
	return rv, err
}

// WaitFresh blocks until the cache has applied rv, asking etcd for progress
// notifications meanwhile so a quiet resource catches up without a write.
// It gives up after freshnessTimeout with the TooLargeResourceVersion error.
// Only a wait is observed, as upstream's read_wait_seconds.
func (f *Feed) WaitFresh(ctx context.Context, rv uint64) error {
	return f.AwaitRV(ctx, rv, FreshnessTimeout, f.metrics.ReadWait.Observe)
}

// AwaitRV is waitFresh with its bound, and observe (nil for none) given
// the seconds of a wait.
func (f *Feed) AwaitRV(ctx context.Context, rv uint64, bound time.Duration, observe func(float64)) error {
	if rv == 0 {
		return nil
	}
	var timeout clock.Timer
	for {
		cur, advanced := f.state.Progress()
		if cur >= rv {
			return nil
		}
		if timeout == nil {
			timeout = f.clock.NewTimer(bound)
			defer timeout.Stop()
			defer f.progress.wait()()
			if observe != nil {
				start := f.clock.Now()
				defer func() { observe(f.clock.Since(start).Seconds()) }()
			}
		}
		select {
		case <-advanced:
		case <-timeout.C():
			return storage.NewTooLargeResourceVersionError(rv, cur, 1)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// RequestProgress asks for one progress notification from etcd (the
// fresh-bookmark probe's), through the progress requester, so it is sent
// at once unless one is on its way.
func (f *Feed) RequestProgress() { f.progress.request() }

// sendProgressRequest asks etcd to report progress on the cache's own watch
// stream (hence the cache's gRPC metadata on the context).
func (f *Feed) sendProgressRequest(ctx context.Context) {
	ctx = metadata.NewOutgoingContext(ctx, f.watchMetadata)
	//lint:ignore SA1019 upstream's cacher asks for progress through it too; storage.Interface has no other way yet
	if err := f.storage.RequestWatchProgress(ctx); err != nil {
		f.logger.V(4).Info("Requesting watch progress failed", "err", err)
		return
	}
	f.metrics.ProgressRequests.Inc()
	f.answers.sent(f.clock.Now())
}
