package debugview

import (
	"errors"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/watchkeeper/watchkeeper/bookmarks"
	"github.com/watchkeeper/watchkeeper/cacher"
	"github.com/watchkeeper/watchkeeper/watchlist"
)

func TestNewSnapshot(t *testing.T) {
	now := time.Date(2100, 1, 1, 0, 0, 2, 0, time.UTC)
	in := cacher.Inspection{
		GroupResource: schema.GroupResource{Group: "demo.watchkeeper.io", Resource: "widgets"},
		Now:           now,
		Ready:         true,
		Watchers:      map[watchlist.State]int{watchlist.BookmarkSent: 5, watchlist.WaitingForBookmark: 1},
		Stalled:       2,
		Calendar: []bookmarks.SlotCount{
			{Start: now.Add(-3 * time.Second), Watchers: 2}, // past: due on the next tick
			{Start: now.Add(8 * time.Second), Watchers: 4},
			{Start: now.Add(time.Hour), Watchers: 1}, // beyond the period
		},
		// Every value distinct, so a field shown as another is caught.
		History: cacher.HistoryInspection{Events: 2, Capacity: 1000, Bound: 100, Window: 25 * time.Second,
			OldestRV: 101, NewestRV: 102, OldestAt: now.Add(-2 * time.Second), NewestAt: now.Add(-1500 * time.Millisecond),
			StartRV: 100, Snapshots: 3},
		CacheRV:          102,
		EtcdRV:           105,
		LastHeard:        now.Add(-500 * time.Millisecond),
		LastTickDuration: 250 * time.Millisecond,
		Config: cacher.Config{BookmarkFrequency: 10 * time.Second, BookmarkPreDeadlineOffset: 2 * time.Second,
			EventsHistoryWindow: 25 * time.Second, BookmarkGranularity: time.Second, BookmarkJitter: 0.25,
			BookmarkMaxStaleness: 3 * time.Second},
	}
	s := newSnapshot(in)
	if s.Group != "demo.watchkeeper.io" || s.Resource != "widgets" || !s.Ready || s.CacheRV != 102 || s.EtcdRV != 105 || s.EtcdError != "" {
		t.Fatalf("header: %+v", s)
	}
	if s.Watchers["BookmarkSent"] != 5 || s.Watchers["WaitingForBookmark"] != 1 || s.Watchers["BookmarkReceived"] != 0 || len(s.Watchers) != 3 {
		t.Errorf("watchers: %v", s.Watchers)
	}
	if s.StalledWatchers != 2 {
		t.Errorf("stalled watchers: %d, want 2", s.StalledWatchers)
	}
	if s.Budget != nil {
		t.Errorf("a budget shown for a resource without one: %+v", *s.Budget)
	}
	in.Config.MaxBytes, in.EstimatedBytes, in.OverBudget, in.Relayed = 1<<20, 3<<20, true, 4
	if b := newSnapshot(in).Budget; b == nil || *b != (BudgetView{MaxBytes: 1 << 20, EstimatedBytes: 3 << 20, Over: true, RelayedWatches: 4}) {
		t.Errorf("budget: %+v", b)
	}
	want := make([]int, 10)
	want[8] = 4
	if c := s.Calendar; !slices.Equal(c.Slots, want) || c.Filed != 7 || c.Overdue != 2 || c.Later != 1 || c.Granularity != 1 {
		t.Errorf("calendar: %+v, want slots %v, filed 7, overdue 2, later 1", c, want)
	}
	wantHistory := HistoryView{Events: 2, Capacity: 1000, Bound: 100, Window: 25, OldestRV: 101, NewestRV: 102,
		OldestAge: 2, NewestAge: 1.5, StartRV: 100, Snapshots: 3}
	if s.History != wantHistory {
		t.Errorf("history: %+v, want %+v", s.History, wantHistory)
	}
	wantSchedule := ScheduleView{BookmarkFrequency: 10, BookmarkPreDeadlineOffset: 2, EventsHistoryWindow: 25,
		BookmarkGranularity: 1, BookmarkJitter: 0.25, BookmarkMaxStaleness: 3}
	if s.Schedule != wantSchedule {
		t.Errorf("schedule: %+v, want %+v", s.Schedule, wantSchedule)
	}
	if s.LastHeardAge != 0.5 || s.LastTickDuration != 0.25 {
		t.Errorf("last heard %vs ago, last tick %vs; want 0.5, 0.25", s.LastHeardAge, s.LastTickDuration)
	}

	in.EtcdErr = errors.New("etcd down")
	if s := newSnapshot(in); s.EtcdRV != 0 || s.EtcdError != "etcd down" {
		t.Errorf("with etcd unreachable: etcdRV %d, error %q", s.EtcdRV, s.EtcdError)
	}
}
