package debugview

import (
	"time"

	"github.com/watchkeeper/watchkeeper/cacher"
	"github.com/watchkeeper/watchkeeper/watchlist"
)

// Snapshot is how one resource's cache is shown: an inspection in seconds
// and counts, the calendar as a histogram over the next bookmark period.
type Snapshot struct {
	Group    string `json:"group"`
	Resource string `json:"resource"`
	Ready    bool   `json:"ready"`
	// Watchers counts open watchers by WatchList state; a plain watch is
	// BookmarkSent.
	Watchers map[string]int `json:"watchers"`
	// StalledWatchers counts the watchers whose client fell behind, out of
	// the fan-out until it reads again.
	StalledWatchers int `json:"stalledWatchers"`
	// Budget is the resource's memory budget, when it has one.
	Budget   *BudgetView  `json:"budget,omitempty"`
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

// BudgetView is a resource's memory budget (--watch-cache-max-bytes): the
// budget, the size last measured, whether it is over it (served from
// etcd) and how many of the watches handed to etcd then are still open.
type BudgetView struct {
	MaxBytes       int64 `json:"maxBytes"`
	EstimatedBytes int64 `json:"estimatedBytes"`
	Over           bool  `json:"over"`
	RelayedWatches int   `json:"relayedWatches"`
}

// Seconds is a duration written as seconds in JSON.
type Seconds float64

func seconds(d time.Duration) Seconds { return Seconds(d.Seconds()) }

// CalendarView is the calendar as a histogram over the next bookmark period.
type CalendarView struct {
	Granularity Seconds `json:"granularitySeconds"`
	Filed       int     `json:"filed"`
	// Overdue counts watchers in slots already past (popped on the next
	// tick).
	Overdue int `json:"overdue"`
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
	// room: it adapts between 100 and Capacity.
	Bound     int     `json:"bound"`
	Window    Seconds `json:"windowSeconds"`
	OldestRV  uint64  `json:"oldestRV"`
	NewestRV  uint64  `json:"newestRV"`
	OldestAge Seconds `json:"oldestAgeSeconds"`
	NewestAge Seconds `json:"newestAgeSeconds"`
	// StartRV is the RV a watch must be at or above to resume from the
	// history; below it a client gets 410.
	StartRV uint64 `json:"startRV"`
	// Snapshots counts the past states kept for exact-RV and paginated lists.
	Snapshots int `json:"snapshots"`
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

// newSnapshot shows an inspection.
func newSnapshot(in cacher.Inspection) Snapshot {
	cfg, now := in.Config, in.Now
	s := Snapshot{
		Group:           in.GroupResource.Group,
		Resource:        in.GroupResource.Resource,
		Ready:           in.Ready,
		Watchers:        map[string]int{},
		StalledWatchers: in.Stalled,
		Budget:          budgetView(in),
		Calendar:        calendarView(in, cfg.BookmarkGranularity, cfg.BookmarkFrequency),
		CacheRV:         in.CacheRV,
		EtcdRV:          in.EtcdRV,
		Schedule: ScheduleView{
			BookmarkFrequency:         seconds(cfg.BookmarkFrequency),
			BookmarkPreDeadlineOffset: seconds(cfg.BookmarkPreDeadlineOffset),
			EventsHistoryWindow:       seconds(cfg.EventsHistoryWindow),
			BookmarkGranularity:       seconds(cfg.BookmarkGranularity),
			BookmarkJitter:            cfg.BookmarkJitter,
			BookmarkMaxStaleness:      seconds(cfg.BookmarkMaxStaleness),
		},
		LastTickDuration: seconds(in.LastTickDuration),
	}
	for _, st := range []watchlist.State{watchlist.WaitingForBookmark, watchlist.BookmarkReceived, watchlist.BookmarkSent} {
		s.Watchers[st.String()] = in.Watchers[st]
	}
	if in.EtcdErr != nil {
		s.EtcdRV, s.EtcdError = 0, in.EtcdErr.Error()
	}
	if !in.LastHeard.IsZero() {
		s.LastHeardAge = seconds(now.Sub(in.LastHeard))
	}
	h := in.History
	s.History = HistoryView{Events: h.Events, Capacity: h.Capacity, Bound: h.Bound, Window: seconds(h.Window),
		OldestRV: h.OldestRV, NewestRV: h.NewestRV, StartRV: h.StartRV, Snapshots: h.Snapshots}
	if h.Events > 0 {
		s.History.OldestAge, s.History.NewestAge = seconds(now.Sub(h.OldestAt)), seconds(now.Sub(h.NewestAt))
	}
	return s
}

// calendarView buckets the filed slots by how far from now they are due.
func calendarView(in cacher.Inspection, granularity, period time.Duration) CalendarView {
	n := max(int(period/granularity), 1)
	v := CalendarView{Granularity: seconds(granularity), Slots: make([]int, n)}
	for _, sc := range in.Calendar {
		start, watchers := sc.Start, sc.Watchers
		v.Filed += watchers
		i := int(start.Sub(in.Now) / granularity)
		switch {
		case start.Before(in.Now) && start.Add(granularity).Before(in.Now):
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

func budgetView(in cacher.Inspection) *BudgetView {
	if in.Config.MaxBytes <= 0 {
		return nil
	}
	return &BudgetView{MaxBytes: in.Config.MaxBytes, EstimatedBytes: in.EstimatedBytes, Over: in.OverBudget, RelayedWatches: in.Relayed}
}
