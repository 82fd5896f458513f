package cacher

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

// consistentRV is etcd's current revision: what a consistent read must see.
func (c *Cacher) consistentRV(ctx context.Context) (uint64, error) {
	rv, err := c.storageRV(ctx)
	if err != nil {
		c.logger.V(2).Info("Consistent read falls back to storage", "err", err)
	}
	return rv, err
}

// storageRV asks the storage for etcd's current revision, for at most
// freshnessTimeout: with etcd down the call would otherwise hang a watch or a
// consistent read for as long as the outage lasts. Giving up is a 504 the
// client retries.
func (c *Cacher) storageRV(ctx context.Context) (uint64, error) {
	bounded, cancel := context.WithTimeout(ctx, freshnessTimeout)
	defer cancel()
	rv, err := c.storage.GetCurrentResourceVersion(bounded)
	if err != nil && ctx.Err() == nil && bounded.Err() != nil {
		return 0, errors.NewTimeoutError(fmt.Sprintf("reading the current resourceVersion of %v took longer than %v", c.cfg.GroupResource, freshnessTimeout), 1)
	}
	return rv, err
}

// waitFresh blocks until the cache has applied rv, asking etcd for progress
// notifications meanwhile so a quiet resource catches up without a write.
// It gives up after freshnessTimeout with the TooLargeResourceVersion error.
// Only a wait is observed, as upstream's read_wait_seconds.
func (c *Cacher) waitFresh(ctx context.Context, rv uint64) error {
	return c.awaitRV(ctx, rv, freshnessTimeout, c.metrics.ReadWait.Observe)
}

// awaitRV is waitFresh with its bound, and observe (nil for none) given
// the seconds of a wait.
func (c *Cacher) awaitRV(ctx context.Context, rv uint64, bound time.Duration, observe func(float64)) error {
	if rv == 0 {
		return nil
	}
	var timeout clock.Timer
	for {
		cur, advanced := c.state.Progress()
		if cur >= rv {
			return nil
		}
		if timeout == nil {
			timeout = c.clock.NewTimer(bound)
			defer timeout.Stop()
			defer c.feed.progress.wait()()
			if observe != nil {
				start := c.clock.Now()
				defer func() { observe(c.clock.Since(start).Seconds()) }()
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

// requestProgress asks etcd to report progress on the cache's own watch
// stream (hence the cache's gRPC metadata on the context).
func (c *Cacher) requestProgress(ctx context.Context) {
	ctx = metadata.NewOutgoingContext(ctx, c.feed.watchMetadata)
	//lint:ignore SA1019 upstream's cacher asks for progress through it too; storage.Interface has no other way yet
	if err := c.storage.RequestWatchProgress(ctx); err != nil {
		c.logger.V(4).Info("Requesting watch progress failed", "err", err)
	}
}

// freshenBookmarks runs on every tick: when bookmarks come due by the next
// tick (at most two granularities away, jitter included) and the cache will
// by then have heard nothing from etcd for BookmarkMaxStaleness, it asks etcd
// for progress now, once for the resource, so those bookmarks carry an RV
// etcd confirmed within the bound.
func (c *Cacher) freshenBookmarks(now time.Time) {
	bound := c.cfg.BookmarkMaxStaleness
	silent, ok := c.silence(now, bound)
	ahead := 2 * c.cfg.BookmarkGranularity
	if !ok || silent+ahead < bound {
		return
	}
	if c.hub.HasDueBy(now.Add(ahead)) {
		c.metrics.FreshnessProbes.Inc()
		c.feed.progress.request()
	}
}
