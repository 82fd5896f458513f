package cacher

import (
	"context"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/utils/ptr"

	"github.com/watchkeeper/watchkeeper/bookmarks"
	"github.com/watchkeeper/watchkeeper/watchlist"
)

func TestInspect(t *testing.T) {
	fs := newFakeStorage(100, newTestPod("a", 100, nil, ""))
	c := newTestCacher(t, fs, func(cfg *Config) { cfg.BookmarkFrequency = 10 * time.Second })
	c.waitReady(t)
	sw, _ := fs.waitWatch(t, 1)
	sw.send(t, watch.Modified, newTestPod("a", 101, nil, ""))
	c.waitRV(t, 101)
	fs.setCurrentRV(105)

	// Three watchers with bookmarks filed 10s out, one without, and a
	// WatchList watcher whose end bookmark goes out at once (the cache holds
	// its floor), so it is BookmarkSent once its pump handed that over.
	for range 3 {
		c.startWatch(t, context.Background(), "101", everything(true))
	}
	c.startWatch(t, context.Background(), "101", everything(false))
	wl, err := c.Watch(context.Background(), "/pods/", storage.ListOptions{
		ResourceVersion: "0", SendInitialEvents: ptr.To(true), Recursive: true, Predicate: everything(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wl.Stop)
	c.clk.Step(2 * time.Second)
	poll(t, "the WatchList watcher's end bookmark to be handed over", func() bool {
		return c.Inspect(context.Background()).Watchers[watchlist.BookmarkSent] == 5
	})

	in := c.Inspect(context.Background())
	if !in.Ready || in.GroupResource.Resource != "pods" || in.CacheRV != 101 || in.EtcdRV != 105 || in.EtcdErr != nil {
		t.Fatalf("inspection header: %+v", in)
	}
	if !in.Now.Equal(testEpoch.Add(2 * time.Second)) {
		t.Errorf("taken at %v, want the cache's clock %v", in.Now, testEpoch.Add(2*time.Second))
	}
	if got := in.Watchers; got[watchlist.BookmarkSent] != 5 || got[watchlist.BookmarkReceived] != 0 || got[watchlist.WaitingForBookmark] != 0 {
		t.Errorf("watchers by state: %v", got)
	}
	// Filed at +0s for +10s: one slot of four watchers.
	want := []bookmarks.SlotCount{{Start: testEpoch.Add(10 * time.Second), Watchers: 4}}
	if !slices.Equal(in.Calendar, want) {
		t.Errorf("calendar: %+v, want %+v", in.Calendar, want)
	}
	h := in.History
	if h.Events != 1 || h.OldestRV != 101 || h.NewestRV != 101 || h.StartRV != 100 || !h.OldestAt.Equal(testEpoch) || h.Bound != minHistory {
		t.Errorf("history: %+v", h)
	}
	if in.Config.BookmarkFrequency != 10*time.Second || in.Config.BookmarkGranularity != time.Second || in.Config.Storage != nil {
		t.Errorf("config: frequency %v, granularity %v, storage %v", in.Config.BookmarkFrequency, in.Config.BookmarkGranularity, in.Config.Storage)
	}
}
