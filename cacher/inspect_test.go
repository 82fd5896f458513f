package cacher

import (
	"context"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/utils/ptr"

	"github.com/watchkeeper/watchkeeper/bookmarks"
	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"
	"github.com/watchkeeper/watchkeeper/cacher/internal/hub"
	"github.com/watchkeeper/watchkeeper/cacher/internal/state"
	"github.com/watchkeeper/watchkeeper/watchlist"
)

func TestInspect(t *testing.T) {
	// More pods than a client's channel holds: a WatchList client that
	// reads nothing keeps its end bookmark queued, BookmarkReceived.
	pods := []*example.Pod{cachertest.NewPod("a", 100, nil, "")}
	for i := 1; i <= hub.ResultBuffer; i++ {
		pods = append(pods, cachertest.NewPod(cachertest.PodName(i), 100, nil, ""))
	}
	fs := cachertest.NewFakeStorage(100, pods...)
	c := newTestCacher(t, fs, func(cfg *Config) { cfg.BookmarkFrequency = 10 * time.Second })
	c.waitReady(t)
	sw, _ := fs.WaitWatch(t, 1)
	// Two events a second apart, so the history's oldest and newest differ.
	sw.Send(t, watch.Modified, cachertest.NewPod("a", 101, nil, ""))
	c.waitRV(t, 101)
	c.clk.Step(time.Second)
	sw.Send(t, watch.Modified, cachertest.NewPod("a", 102, nil, ""))
	c.waitRV(t, 102)
	fs.SetCurrentRV(105)

	// Three watchers with bookmarks filed 10s out, one without, and a
	// WatchList watcher whose end bookmark is queued at once (the cache
	// holds its floor) behind initial events its client does not read.
	for range 3 {
		c.startWatch(t, context.Background(), "102", cachertest.Everything(true))
	}
	c.startWatch(t, context.Background(), "102", cachertest.Everything(false))
	wl, err := c.Watch(context.Background(), "/pods/", storage.ListOptions{
		ResourceVersion: "0", SendInitialEvents: ptr.To(true), Recursive: true, Predicate: cachertest.Everything(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wl.Stop)
	c.clk.Step(time.Second)
	cachertest.Poll(t, "the WatchList watcher's channel to fill", func() bool { return len(wl.ResultChan()) == hub.ResultBuffer })

	in := c.Inspect(context.Background())
	if !in.Ready || in.GroupResource.Resource != "pods" || in.CacheRV != 102 || in.EtcdRV != 105 || in.EtcdErr != nil {
		t.Fatalf("inspection header: %+v", in)
	}
	if !in.Now.Equal(cachertest.Epoch.Add(2 * time.Second)) {
		t.Errorf("taken at %v, want the cache's clock %v", in.Now, cachertest.Epoch.Add(2*time.Second))
	}
	if got := in.Watchers; got[watchlist.BookmarkSent] != 4 || got[watchlist.BookmarkReceived] != 1 || got[watchlist.WaitingForBookmark] != 0 {
		t.Errorf("watchers by state: %v, want 4 BookmarkSent and 1 BookmarkReceived", got)
	}
	// Filed at +1s for +11s: one slot of four watchers.
	want := []bookmarks.SlotCount{{Start: cachertest.Epoch.Add(11 * time.Second), Watchers: 4}}
	if !slices.Equal(in.Calendar, want) {
		t.Errorf("calendar: %+v, want %+v", in.Calendar, want)
	}
	h := in.History
	if h.Events != 2 || h.OldestRV != 101 || h.NewestRV != 102 || h.StartRV != 100 || h.Bound != state.MinHistory ||
		!h.OldestAt.Equal(cachertest.Epoch) || !h.NewestAt.Equal(cachertest.Epoch.Add(time.Second)) {
		t.Errorf("history: %+v", h)
	}
	if in.Config.BookmarkFrequency != 10*time.Second || in.Config.BookmarkGranularity != time.Second || in.Config.Storage != nil {
		t.Errorf("config: frequency %v, granularity %v, storage %v", in.Config.BookmarkFrequency, in.Config.BookmarkGranularity, in.Config.Storage)
	}
}
