package cacher

import (
	"context"
	"slices"
	"time"
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
func (c *Cacher) BookmarkAll(ctx context.Context) (queued, taken int) {
	reply := make(chan []*watcher, 1)
	select {
	case c.bookmarkAll <- reply:
	case <-c.stopCh:
		return 0, 0
	case <-ctx.Done():
		return 0, 0
	}
	var ws []*watcher
	select {
	case ws = <-reply:
	case <-ctx.Done():
		return 0, 0
	}
	queued = len(ws)
	poll := c.clock.NewTicker(bookmarkTakenPoll)
	defer poll.Stop()
	for {
		ws = slices.DeleteFunc(ws, (*watcher).tookAll)
		if len(ws) == 0 {
			return queued, queued
		}
		select {
		case <-poll.C():
		case <-ctx.Done():
			return queued, queued - len(ws)
		case <-c.stopCh:
			return queued, queued - len(ws)
		}
	}
}

// bookmarkTakenPoll is how often BookmarkAll looks whether the clients took
// their bookmarks: a client that keeps up takes one within microseconds.
const bookmarkTakenPoll = 10 * time.Millisecond

// bookmarkEvery is BookmarkAll's work on the dispatcher goroutine, at the
// dispatcher's RV: every event at or below it is queued ahead.
func (c *Cacher) bookmarkEvery(rv uint64) []*watcher {
	shared := c.sharedBookmark(rv)
	nowNanos := c.clock.Now().UnixNano()
	var sent []*watcher
	c.state.mu.RLock()
	for w := range c.watchers.all {
		if w.bookmarks && w.offerBookmark(rv, shared, nowNanos, true) {
			sent = append(sent, w)
		}
	}
	c.state.mu.RUnlock()
	c.metrics.bookmarksSent.Add(float64(len(sent)))
	return sent
}

// tookAll is whether the client took everything queued for it, or the
// watcher closed.
func (w *watcher) tookAll() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state == watcherClosed || (w.queuedLocked() == 0 && len(w.result) == 0)
}
