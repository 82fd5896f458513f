package cacher

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"
	"github.com/watchkeeper/watchkeeper/cacher/internal/hub"
)

// Before a server stops, every watcher that takes bookmarks gets one at the
// dispatched RV, behind the events still queued for it, and BookmarkAll
// returns once the clients have taken them; a watcher without bookmarks
// gets none.
func TestBookmarkAllQueuesABookmarkBehindEachWatchersEvents(t *testing.T) {
	_, c, sw := cacherListedAt100(t)
	ctx := context.Background()
	behind := c.startWatch(t, ctx, "100", cachertest.Everything(true))
	idle := c.startWatch(t, ctx, "100", cachertest.Everything(true))
	plain := c.startWatch(t, ctx, "100", cachertest.Everything(false))
	// More events than a client's channel holds: the rest wait in the
	// watchers' queues until their clients read.
	const last = 100 + 2*hub.ResultBuffer
	for rv := uint64(101); rv <= last; rv++ {
		sw.Send(t, watch.Added, cachertest.NewPod(cachertest.PodName(int(rv)), rv, nil, ""))
	}
	for rv := uint64(101); rv <= last; rv++ {
		if ev := cachertest.NextEvent(t, idle); cachertest.EventRV(t, ev) != rv {
			t.Fatalf("idle watcher: %s, want the event at %d", cachertest.Describe(ev), rv)
		}
	}

	type result struct{ queued, taken int }
	done := make(chan result, 1)
	go func() {
		q, tk := c.BookmarkAll(ctx)
		done <- result{q, tk}
	}()
	if ev := cachertest.NextEvent(t, idle); ev.Type != watch.Bookmark || cachertest.EventRV(t, ev) != last {
		t.Fatalf("idle watcher: %s, want a bookmark at %d", cachertest.Describe(ev), last)
	}
	for range 5 {
		c.clk.Step(bookmarkTakenPoll)
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case r := <-done:
		t.Fatalf("BookmarkAll returned %+v before a client read its queue", r)
	default:
	}
	for rv := uint64(101); rv <= last; rv++ {
		if ev := cachertest.NextEvent(t, behind); cachertest.EventRV(t, ev) != rv {
			t.Fatalf("watcher behind: %s, want the event at %d", cachertest.Describe(ev), rv)
		}
	}
	if ev := cachertest.NextEvent(t, behind); ev.Type != watch.Bookmark || cachertest.EventRV(t, ev) != last {
		t.Fatalf("watcher behind: %s after its events, want a bookmark at %d", cachertest.Describe(ev), last)
	}
	for rv := uint64(101); rv <= last; rv++ {
		if ev := cachertest.NextEvent(t, plain); cachertest.EventRV(t, ev) != rv {
			t.Fatalf("watcher without bookmarks: %s, want the event at %d", cachertest.Describe(ev), rv)
		}
	}
	var r result
	cachertest.Poll(t, "BookmarkAll to return once every client took its bookmark", func() bool {
		select {
		case r = <-done:
			return true
		default:
			c.clk.Step(bookmarkTakenPoll)
			return false
		}
	})
	if r != (result{2, 2}) {
		t.Fatalf("BookmarkAll: %+v, want 2 queued and 2 taken", r)
	}
	cachertest.ExpectQuiet(t, plain, "a watcher without bookmarks")
}

// A quiet resource's cache is behind etcd by the other resources' writes
// since its last progress notification; its shutdown bookmark must not be:
// the cache first asks etcd for progress and bookmarks at etcd's revision,
// so its clients resume from the shutdown and not from thousands of
// revisions before it.
func TestBookmarkAllCatchesUpWithEtcdFirst(t *testing.T) {
	fs, c, sw := cacherListedAt100(t)
	ctx := context.Background()
	w := c.startWatch(t, ctx, "100", cachertest.Everything(true))
	fs.SetCurrentRV(5000)
	before := fs.ProgressCount()

	done := make(chan int, 1)
	go func() {
		_, taken := c.BookmarkAll(ctx)
		done <- taken
	}()
	cachertest.Poll(t, "a progress request to etcd", func() bool { return fs.ProgressCount() > before })
	cachertest.ExpectQuiet(t, w, "a watcher before etcd's progress notification")
	sw.SendBookmark(t, 5000)
	if ev := cachertest.NextEvent(t, w); ev.Type != watch.Bookmark || cachertest.EventRV(t, ev) != 5000 {
		t.Fatalf("watcher: %s, want a bookmark at etcd's revision 5000", cachertest.Describe(ev))
	}
	var taken int
	cachertest.Poll(t, "BookmarkAll to return", func() bool {
		select {
		case taken = <-done:
			return true
		default:
			c.clk.Step(bookmarkTakenPoll)
			return false
		}
	})
	if taken != 1 {
		t.Fatalf("BookmarkAll: %d taken, want 1", taken)
	}
}

// With etcd unreachable the shutdown bookmark still goes out, at the RV the
// cache has.
func TestBookmarkAllWithoutEtcdBookmarksAtTheCachesRV(t *testing.T) {
	fs, c, _ := cacherListedAt100(t)
	ctx := context.Background()
	w := c.startWatch(t, ctx, "100", cachertest.Everything(true))
	fs.SetUnreachable(true)
	go c.BookmarkAll(ctx)
	if ev := cachertest.NextEvent(t, w); ev.Type != watch.Bookmark || cachertest.EventRV(t, ev) != 100 {
		t.Fatalf("watcher: %s, want a bookmark at the cache's 100", cachertest.Describe(ev))
	}
}

// An etcd that does not answer the progress request holds the shutdown
// bookmark for shutdownCatchUpTimeout at most: then it goes out at the RV
// the cache has, with the clients' time to read it left.
func TestBookmarkAllCatchUpIsBounded(t *testing.T) {
	fs, c, _ := cacherListedAt100(t)
	ctx := context.Background()
	w := c.startWatch(t, ctx, "100", cachertest.Everything(true))
	fs.SetCurrentRV(5000)
	before := fs.ProgressCount()
	go c.BookmarkAll(ctx)
	cachertest.Poll(t, "a progress request to etcd", func() bool { return fs.ProgressCount() > before })
	c.clk.Step(shutdownCatchUpTimeout - time.Millisecond)
	cachertest.ExpectQuiet(t, w, "a watcher before the catch-up's bound")
	c.clk.Step(time.Millisecond)
	if ev := cachertest.NextEvent(t, w); ev.Type != watch.Bookmark || cachertest.EventRV(t, ev) != 100 {
		t.Fatalf("watcher: %s, want a bookmark at the cache's 100 once the catch-up gave up", cachertest.Describe(ev))
	}
}
