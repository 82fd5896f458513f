package cacher

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/watchkeeper/watchkeeper/bookmarks"
	"github.com/watchkeeper/watchkeeper/watchlist"
)

// Snapshot is what one resource's cache looks like at a moment: for the
// debug view (debugview/) and for tools. It is a copy; nothing in it is live.
type Snapshot struct {
	Group    string `json:"group"`
	Resource string `json:"resource"`
	Ready    bool   `json:"ready"`
	// Watchers counts open watchers by WatchList state; a plain watch is
	// BookmarkSent.
	Watchers map[string]int `json:"watchers"`
	// Calendar is how many watchers are filed in each slot of the next
	// bookmark period, from now; Overdue counts those in slots already past
	// (popped on the next tick).
	Calendar CalendarView `json:"calendar"`
	History  HistoryView  `json:"history"`
	// CacheRV is the RV the cache has applied; EtcdRV etcd's current
	// revision (0 with EtcdError set when it could not be read).
	CacheRV   uint64 `json:"cacheRV"`
	EtcdRV    uint64 `json:"etcdRV"`
	EtcdError string `json:"etcdError,omitempty"`
	// LastHeardAge is how long ago the storage watch last delivered
	// anything, progress notifications included.
	LastHeardAge     Seconds `json:"lastHeardAgeSeconds"`
	LastTickDuration Seconds `json:"lastTickDurationSeconds"`
	// Schedule is the resource's effective schedule.
	Schedule ScheduleView `json:"schedule"`
}

// Seconds is a duration written as seconds in JSON.
type Seconds float64

func seconds(d time.Duration) Seconds { return Seconds(d.Seconds()) }

// CalendarView is the calendar as a histogram over the next bookmark period.
type CalendarView struct {
	Granularity Seconds `json:"granularitySeconds"`
	Filed       int     `json:"filed"`
	Overdue     int     `json:"overdue"`
	// Slots[i] counts the watchers due in [i, i+1) granularities from now.
	Slots []int `json:"slots"`
	// Later counts watchers filed beyond the period (a deadline far off
	// cannot be, but a larger frequency override could).
	Later int `json:"later"`
}

// HistoryView describes the event history's span.
type HistoryView struct {
	Events   int `json:"events"`
	Capacity int `json:"capacity"`
	// Bound is how many events the history holds before an event makes
	// room: it adapts between 100 and Capacity (history.go).
	Bound     int     `json:"bound"`
	Window    Seconds `json:"windowSeconds"`
	OldestRV  uint64  `json:"oldestRV"`
	NewestRV  uint64  `json:"newestRV"`
	OldestAge Seconds `json:"oldestAgeSeconds"`
	NewestAge Seconds `json:"newestAgeSeconds"`
	// StartRV is the RV a watch must be at or above to resume from the
	// history; below it a client gets 410.
	StartRV uint64 `json:"startRV"`
}

// ScheduleView is the resource's effective schedule.
type ScheduleView struct {
	BookmarkFrequency         Seconds `json:"bookmarkFrequencySeconds"`
	BookmarkPreDeadlineOffset Seconds `json:"bookmarkPreDeadlineOffsetSeconds"`
	EventsHistoryWindow       Seconds `json:"eventsHistoryWindowSeconds"`
	BookmarkGranularity       Seconds `json:"bookmarkGranularitySeconds"`
	BookmarkJitter            float64 `json:"bookmarkJitter"`
	BookmarkMaxStaleness      Seconds `json:"bookmarkMaxStalenessSeconds"`
}

// Snapshot reads the cache's state. It holds the cache's read lock while
// it copies (the calendar scan is O(slots filed)), then asks etcd for its
// revision, for at most the freshness timeout.
func (c *Cacher) Snapshot(ctx context.Context) Snapshot {
	now := c.clock.Now()
	s := Snapshot{
		Group:    c.groupResource.Group,
		Resource: c.groupResource.Resource,
		Watchers: map[string]int{},
		Schedule: ScheduleView{
			BookmarkFrequency:         seconds(c.cfg.BookmarkFrequency),
			BookmarkPreDeadlineOffset: seconds(c.cfg.BookmarkPreDeadlineOffset),
			EventsHistoryWindow:       seconds(c.cfg.EventsHistoryWindow),
			BookmarkGranularity:       seconds(c.cfg.BookmarkGranularity),
			BookmarkJitter:            c.cfg.BookmarkJitter,
			BookmarkMaxStaleness:      seconds(c.cfg.BookmarkMaxStaleness),
		},
		LastTickDuration: seconds(time.Duration(c.lastTickNanos.Load())),
	}
	for _, st := range []watchlist.State{watchlist.WaitingForBookmark, watchlist.BookmarkReceived, watchlist.BookmarkSent} {
		s.Watchers[st.String()] = 0
	}
	if heard := c.heardNanos.Load(); heard > 0 {
		s.LastHeardAge = seconds(now.Sub(time.Unix(0, heard)))
	}

	c.mu.RLock()
	s.Ready = c.ready.state == stateReady
	s.CacheRV = c.rv
	for w := range c.watchers.all {
		w.mu.Lock()
		s.Watchers[w.tracker.State().String()]++
		w.mu.Unlock()
	}
	s.Calendar = calendarView(c.calendar.Slots(), now, c.cfg.BookmarkGranularity, c.cfg.BookmarkFrequency)
	h := c.history
	s.History = HistoryView{Events: h.len(), Capacity: h.capacity, Bound: h.limit, Window: seconds(h.window), StartRV: h.startRV}
	if oldest, newest := h.span(); oldest != nil {
		s.History.OldestRV, s.History.NewestRV = oldest.rv, newest.rv
		s.History.OldestAge = seconds(now.Sub(time.Unix(0, oldest.recordedNanos)))
		s.History.NewestAge = seconds(now.Sub(time.Unix(0, newest.recordedNanos)))
	}
	c.mu.RUnlock()

	if rv, err := c.storageRV(ctx); err != nil {
		s.EtcdError = err.Error()
	} else {
		s.EtcdRV = rv
	}
	return s
}

// calendarView buckets filed slots by how far from now they are due.
func calendarView(slots []bookmarks.SlotCount, now time.Time, granularity, period time.Duration) CalendarView {
	n := max(int(period/granularity), 1)
	v := CalendarView{Granularity: seconds(granularity), Slots: make([]int, n)}
	for _, sc := range slots {
		start, watchers := sc.Start, sc.Watchers
		v.Filed += watchers
		i := int(start.Sub(now) / granularity)
		switch {
		case start.Before(now) && start.Add(granularity).Before(now):
			v.Overdue += watchers
		case i < 0:
			v.Slots[0] += watchers
		case i < n:
			v.Slots[i] += watchers
		default:
			v.Later += watchers
		}
	}
	return v
}

// registry holds every running cache, for a debug handler that shows them
// all without the server having to thread them through.
var registry = struct {
	sync.Mutex
	caches map[*Cacher]struct{}
}{caches: map[*Cacher]struct{}{}}

func register(c *Cacher) {
	registry.Lock()
	defer registry.Unlock()
	registry.caches[c] = struct{}{}
}

func unregister(c *Cacher) {
	registry.Lock()
	defer registry.Unlock()
	delete(registry.caches, c)
}

// Running lists the caches of this process that have not been stopped,
// ordered by group and resource.
func Running() []*Cacher {
	registry.Lock()
	out := make([]*Cacher, 0, len(registry.caches))
	for c := range registry.caches {
		out = append(out, c)
	}
	registry.Unlock()
	slices.SortFunc(out, func(a, b *Cacher) int {
		return cmp.Or(cmp.Compare(a.groupResource.Group, b.groupResource.Group),
			cmp.Compare(a.groupResource.Resource, b.groupResource.Resource))
	})
	return out
}
