package cacher

import (
	"context"
	"slices"
	"time"

	"github.com/watchkeeper/watchkeeper/cacher/internal/hub"
)

// BookmarkAll queues, for every watcher whose client takes bookmarks, one
// at the RV the cache has dispatched, behind whatever is queued for it, and
// waits until the clients have taken them or ctx ends. It returns how many
// were queued and how many of those their clients took.
//
// A server about to stop calls it before it ends its watches. A client
// otherwise resumes from its last event or bookmark, up to the bookmark
// frequency (a minute) back: a kubelet's pod watch hears only its node's
// pods. Upstream's cache answers such a resume with 410 and the client
// relists; a restarted watchkeeper backfills the gap from etcd, and at
// 1,000 nodes the pods' gap was 25,000 revisions, more than a restarting
// server reads within backfillTimeout. With this bookmark the gap is the
// restart's own.
//
// First the cache catches up with etcd's current revision (catchUp): a
// quiet resource's RV moves only with etcd's progress notifications, and
// its bookmark at the RV it had would send its clients back as many
// revisions as the other resources' writes made since the last one.
func (c *Cacher) BookmarkAll(ctx context.Context) (queued, taken int) {
	ws, ok := c.loop.BookmarkEvery(ctx, c.catchUp(ctx))
	if !ok {
		return 0, 0
	}
	queued = len(ws)
	poll := c.clock.NewTicker(bookmarkTakenPoll)
	defer poll.Stop()
	for {
		ws = slices.DeleteFunc(ws, (*hub.Watcher).TookAll)
		if len(ws) == 0 {
			return queued, queued
		}
		select {
		case <-poll.C():
		case <-ctx.Done():
			return queued, queued - len(ws)
		case <-c.life.stopCh:
			return queued, queued - len(ws)
		}
	}
}

// catchUp brings the cache to etcd's current revision, for shutdown
// bookmarks, and returns it; 0 when there is no watcher to bookmark or the
// cache did not reach it within shutdownCatchUpTimeout, and the bookmarks
// then go out at the RV the cache has.
func (c *Cacher) catchUp(ctx context.Context) uint64 {
	if c.hub.Len() == 0 {
		return 0
	}
	rvCtx, cancel := context.WithTimeout(ctx, shutdownCatchUpTimeout)
	rv, err := c.feed.StorageRV(rvCtx)
	cancel()
	if err == nil {
		err = c.feed.AwaitRV(ctx, rv, shutdownCatchUpTimeout, nil)
	}
	if err != nil {
		c.logger.V(2).Info("Shutdown bookmarks at the cache's own resourceVersion: it did not catch up with etcd's", "err", err)
		return 0
	}
	return rv
}

// shutdownCatchUpTimeout bounds the catch-up before the shutdown bookmarks:
// a healthy etcd lets the cache catch up well within it, even on a large
// cluster (docs/kube-load.md), and a slow one must not take all the time
// the clients have to read their bookmark (the server waits 2s for both).
const shutdownCatchUpTimeout = time.Second

// bookmarkTakenPoll is how often BookmarkAll looks whether the clients took
// their bookmarks: a client that keeps up takes one within microseconds.
const bookmarkTakenPoll = 10 * time.Millisecond
