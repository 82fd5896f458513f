package cacher

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/watchkeeper/watchkeeper/bookmarks"
	"github.com/watchkeeper/watchkeeper/cacher/internal/hub"
	"github.com/watchkeeper/watchkeeper/cacher/internal/state"
	"github.com/watchkeeper/watchkeeper/watchlist"
)

// Inspection is what one resource's cache holds at a moment, as facts: a
// copy, nothing in it is live. How to show it is debugview's job.
type Inspection struct {
	GroupResource schema.GroupResource
	// Now is when it was taken, on the cache's clock.
	Now   time.Time
	Ready bool
	// Watchers counts the watchers in the fan-out by WatchList state; a
	// plain watch is BookmarkSent.
	Watchers map[watchlist.State]int
	// Stalled counts the watchers out of the fan-out because their client
	// fell behind, to be fed from the history when it reads again
	// (Config.StallSlowWatchers).
	Stalled int
	// OverBudget is whether the resource is over its memory budget
	// (Config.MaxBytes): it holds nothing and is served from etcd.
	// EstimatedBytes is its size as the budget last measured it (0 with no
	// budget); Relayed counts the watches handed to etcd when it went over
	// that are still open.
	OverBudget     bool
	EstimatedBytes int64
	Relayed        int
	// SiblingKins counts the kins (controllers, generateNames, namespaces
	// with an object cached) whose last object the cache keeps, for each
	// new object of the kin to share what it has equal
	// (Config.ShareSiblings).
	SiblingKins int
	// Calendar is every filed slot of the bookmark calendar, oldest first.
	Calendar []bookmarks.SlotCount
	History  HistoryInspection
	// CacheRV is the RV the cache has applied; EtcdRV etcd's current
	// revision, unless EtcdErr says why it could not be read.
	CacheRV, EtcdRV uint64
	EtcdErr         error
	// LastHeard is when the storage watch last delivered anything, progress
	// notifications included; zero before the first watch.
	LastHeard        time.Time
	LastTickDuration time.Duration
	// Config is the cache's effective configuration (defaults applied).
	Config Config
}

// HistoryInspection describes the event history.
type HistoryInspection struct {
	Events, Capacity int
	// Bound is how many events it holds before an event makes room: it
	// adapts between 100 and Capacity (history.go).
	Bound  int
	Window time.Duration
	// Oldest and Newest are the retained events' RVs and when the cache
	// applied them; zero when the history is empty.
	OldestRV, NewestRV uint64
	OldestAt, NewestAt time.Time
	// StartRV is the RV a watch must be at or above to resume from the
	// history; below it a client gets 410.
	StartRV uint64
	// Snapshots counts the past states kept for exact-RV and paginated
	// lists (snapshots.go).
	Snapshots int
}

// Inspect reads the cache's state. It holds the cache's read lock while it
// copies (the calendar scan is O(slots filed)), then asks etcd for its
// revision, for at most the freshness timeout.
func (c *Cacher) Inspect(ctx context.Context) Inspection {
	in := Inspection{
		GroupResource:    c.cfg.GroupResource,
		Now:              c.clock.Now(),
		Watchers:         map[watchlist.State]int{},
		LastTickDuration: c.loop.LastTick(),
		Config:           c.cfg,
		LastHeard:        c.feed.LastHeard(),
	}
	in.Config.Storage = nil // the wrapped storage is not a fact to show

	var hi state.HistoryStats
	in.Ready, in.CacheRV, hi = c.state.Inspect()
	in.History = HistoryInspection(hi)
	c.hub.Each(func(w *hub.Watcher) { in.Watchers[w.ListState()]++ })
	in.Stalled = c.hub.StalledLen()
	in.Calendar = c.hub.CalendarSlots()
	in.OverBudget, in.Relayed = c.feed.OverBudget(), c.relays.len()
	in.EstimatedBytes = c.feed.BudgetBytes()
	in.SiblingKins = c.feed.SiblingKins()

	in.EtcdRV, in.EtcdErr = c.feed.StorageRV(ctx)
	return in
}
