package cacher

import (
	"context"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/utils/ptr"
)

func TestSnapshot(t *testing.T) {
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
		return c.Snapshot(context.Background()).Watchers["BookmarkSent"] == 5
	})

	s := c.Snapshot(context.Background())
	if !s.Ready || s.Resource != "pods" || s.CacheRV != 101 || s.EtcdRV != 105 || s.EtcdError != "" {
		t.Fatalf("snapshot header: %+v", s)
	}
	if got := s.Watchers; got["BookmarkSent"] != 5 || got["BookmarkReceived"] != 0 || got["WaitingForBookmark"] != 0 {
		t.Errorf("watchers by state: %v", got)
	}
	// Filed at +0s for +10s; seen from +2s they are due in slot 8 (of 10).
	want := make([]int, 10)
	want[8] = 4
	if !slices.Equal(s.Calendar.Slots, want) || s.Calendar.Filed != 4 || s.Calendar.Overdue != 0 {
		t.Errorf("calendar: %+v, want slots %v", s.Calendar, want)
	}
	if h := s.History; h.Events != 1 || h.OldestRV != 101 || h.NewestRV != 101 || h.StartRV != 100 || h.OldestAge != 2 {
		t.Errorf("history: %+v", h)
	}
	if s.Schedule.BookmarkFrequency != 10 || s.Schedule.BookmarkGranularity != 1 {
		t.Errorf("schedule: %+v", s.Schedule)
	}
	if !slices.Contains(Running(), c.Cacher) {
		t.Error("a running cache is missing from Running()")
	}
	c.Stop()
	if slices.Contains(Running(), c.Cacher) {
		t.Error("a stopped cache is still in Running()")
	}
}
