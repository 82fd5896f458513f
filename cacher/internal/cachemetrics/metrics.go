package cachemetrics

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/storage"
	upstream "k8s.io/apiserver/pkg/storage/cacher/metrics"
	compbasemetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/watchkeeper/watchkeeper/watchlist"
)

// Where a metric means what upstream's does, it is upstream's own collector
// (apiserver_watch_cache_*), so dashboards keep working and a server that
// runs both caches registers each name once. The rest are ours.
const (
	namespace = "watchkeeper"
	subsystem = "watch_cache"
)

var (
	bookmarksSent = compbasemetrics.NewCounterVec(&compbasemetrics.CounterOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "bookmarks_sent_total",
		Help:           "Bookmarks queued for watchers by the bookmark tick, by resource.",
		StabilityLevel: compbasemetrics.ALPHA,
	}, []string{"group", "resource"})
	storageBookmarks = compbasemetrics.NewCounterVec(&compbasemetrics.CounterOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "storage_bookmarks_total",
		Help:           "Progress notifications received from the storage layer: they move the cache's resourceVersion and are deliberately not forwarded to watchers.",
		StabilityLevel: compbasemetrics.ALPHA,
	}, []string{"group", "resource"})
	tickDuration = compbasemetrics.NewHistogramVec(&compbasemetrics.HistogramOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "bookmark_tick_duration_seconds",
		Help:           "Time one bookmark tick took: popping due watchers, queueing their bookmark and filing them again.",
		Buckets:        compbasemetrics.ExponentialBuckets(0.00001, 4, 10),
		StabilityLevel: compbasemetrics.ALPHA,
	}, []string{"group", "resource"})
	watchersDue = compbasemetrics.NewHistogramVec(&compbasemetrics.HistogramOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "bookmark_tick_watchers_due",
		Help:           "Watchers whose bookmark was due on a tick that had any.",
		Buckets:        compbasemetrics.ExponentialBuckets(1, 4, 10),
		StabilityLevel: compbasemetrics.ALPHA,
	}, []string{"group", "resource"})
	watchersByState = compbasemetrics.NewGaugeVec(&compbasemetrics.GaugeOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "watchers",
		Help:           "Open watchers by WatchList state (a plain watch is BookmarkSent).",
		StabilityLevel: compbasemetrics.ALPHA,
	}, []string{"group", "resource", "state"})
	historyEvents = compbasemetrics.NewGaugeVec(&compbasemetrics.GaugeOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "history_events",
		Help:           "Events held in the history for resuming watches.",
		StabilityLevel: compbasemetrics.ALPHA,
	}, []string{"group", "resource"})
	historyForcedEvictions = compbasemetrics.NewCounterVec(&compbasemetrics.CounterOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "history_forced_evictions_total",
		Help:           "Events dropped from the history before the window elapsed because the history was at capacity.",
		StabilityLevel: compbasemetrics.ALPHA,
	}, []string{"group", "resource"})
	expiredWatches = compbasemetrics.NewCounterVec(&compbasemetrics.CounterOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "expired_watches_total",
		Help:           "Watches refused with 410 Expired because their resourceVersion left the history.",
		StabilityLevel: compbasemetrics.ALPHA,
	}, []string{"group", "resource"})
	freshnessTimeouts = compbasemetrics.NewCounterVec(&compbasemetrics.CounterOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "freshness_timeouts_total",
		Help: "Requests that waited the freshness timeout for the cache to reach the resourceVersion they need and were " +
			"answered 504 (a WatchList ends so that its client lists instead), by kind of request: watchlist, list. A plain watch waits for nothing.",
		StabilityLevel: compbasemetrics.ALPHA,
	}, []string{"group", "resource", "request"})
	freshnessProbes = compbasemetrics.NewCounterVec(&compbasemetrics.CounterOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "bookmark_freshness_probes_total",
		Help:           "Progress requests made so that bookmarks about to be due carry an RV etcd confirmed within --watch-cache-bookmark-max-staleness.",
		StabilityLevel: compbasemetrics.ALPHA,
	}, []string{"group", "resource"})
	progressRequests = compbasemetrics.NewCounterVec(&compbasemetrics.CounterOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "progress_requests_total",
		Help: "Progress requests the cache sent etcd on its own watch stream (for reads and watches waiting for a " +
			"resourceVersion, the storage liveness check and fresh bookmarks).",
		StabilityLevel: compbasemetrics.ALPHA,
	}, []string{"group", "resource"})
	progressAnswer = compbasemetrics.NewHistogramVec(&compbasemetrics.HistogramOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "progress_request_answer_seconds",
		Help: "Time from the oldest progress request not yet answered to the next progress notification the cache's " +
			"storage watch delivered. etcd answers a request only while every watch on the stream is synced; a request " +
			"it did not answer stays the oldest until one is, so the re-sent ones count from the first.",
		Buckets:        compbasemetrics.ExponentialBuckets(0.001, 2, 15),
		StabilityLevel: compbasemetrics.ALPHA,
	}, []string{"group", "resource"})
	storageWatchRetries = compbasemetrics.NewCounterVec(&compbasemetrics.CounterOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "storage_watch_retries_total",
		Help: "Storage watches re-opened from the cache's resourceVersion after a transient failure (no leader, unavailable, " +
			"a broken stream), the cache staying ready and its watchers open.",
		StabilityLevel: compbasemetrics.ALPHA,
	}, []string{"group", "resource"})
	dropped = compbasemetrics.NewCounterVec(&compbasemetrics.CounterOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "dropped_total",
		Help: "Events and bookmarks a client was owed but not sent because the cache could not build them (metadata " +
			"unreadable, resourceVersion not settable), by what: event, moved-out-delete, initial-event, bookmark. Each is also logged.",
		StabilityLevel: compbasemetrics.ALPHA,
	}, []string{"group", "resource", "what"})
	notReady = compbasemetrics.NewCounterVec(&compbasemetrics.CounterOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "not_ready_total",
		Help: "Transitions of the cache from ready to not ready (reads that need it are answered 429 or sent to etcd until it is " +
			"ready again), by reason: relist (its storage watch failed in a way only a relist mends: a compaction past its " +
			"resourceVersion, an inconsistency with etcd, an event it could not apply), storage_silent (its storage watch said " +
			"nothing for the silence timeout and was re-opened), storage_watch_failing (its storage watch kept failing past " +
			"the retry window), over_budget (it went over its memory budget and is served from etcd), stopped.",
		StabilityLevel: compbasemetrics.ALPHA,
	}, []string{"group", "resource", "reason"})
	readsToStorage = compbasemetrics.NewCounterVec(&compbasemetrics.CounterOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "reads_to_storage_total",
		Help: "Gets, lists and watches the cache sent on to the wrapped storage (etcd) instead of serving them, by verb (get, list) " +
			"and reason: not_ready (the cache was not ready), consistent (a get with resourceVersion \"\"), delegated (a list " +
			"the cache does not serve, as upstream's delegator decides), no_snapshot (an exact-resourceVersion or continued " +
			"list whose state the snapshots no longer hold), consistent_fallback (a consistent list the cache could not " +
			"catch up for), over_budget (the resource is over its memory budget; the only reason a watch is sent on).",
		StabilityLevel: compbasemetrics.ALPHA,
	}, []string{"group", "resource", "verb", "reason"})

	slowWatchers = compbasemetrics.NewCounterVec(&compbasemetrics.CounterOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "slow_watchers_total",
		Help: "Watchers whose client fell behind (their queue full, or nothing read for 10s), by outcome: stalled (gave up " +
			"their queue and left the fan-out until their client reads again, --watch-cache-stall-slow-watchers), resumed (a " +
			"stalled one fed from the history and registered again), closed_unresponsive (closed at once, stalling off), " +
			"closed_position_expired (a stalled one whose position the history no longer held, ended with 410 Gone). The " +
			"closed ones are also counted in apiserver_terminated_watchers_total.",
		StabilityLevel: compbasemetrics.ALPHA,
	}, []string{"group", "resource", "outcome"})

	registerOnce sync.Once
	// backfills is made at registration: its help names the backfill
	// cooldown, which is the feed's to say.
	backfills *compbasemetrics.CounterVec
)

func registerMetrics(backfillCooldown time.Duration) {
	registerOnce.Do(func() {
		backfills = compbasemetrics.NewCounterVec(&compbasemetrics.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "history_backfills_total",
			Help: fmt.Sprintf("Backfills of the history from etcd for watches resuming from before the cache's list, by result: filled, failed, too_far (a resume further behind the cache than a backfill may reach: 410 Expired without one). "+
				"For %v after a failure, such resumes get 410 Expired at once (expired_watches_total) rather than wait on another.", backfillCooldown),
			StabilityLevel: compbasemetrics.ALPHA,
		}, []string{"group", "resource", "result"})
		upstream.Register()
		if c := DispatchStages.register(); c != nil {
			legacyregistry.Registerer().MustRegister(c)
		}
		for _, m := range []compbasemetrics.Registerable{
			bookmarksSent, storageBookmarks, tickDuration, watchersDue, watchersByState,
			historyEvents, historyForcedEvictions, expiredWatches, backfills, freshnessTimeouts, freshnessProbes,
			progressRequests, progressAnswer,
			storageWatchRetries, dropped, notReady, readsToStorage, slowWatchers,
		} {
			legacyregistry.MustRegister(m)
		}
		registerBudgetMetrics()
	})
}

// Resource are one resource's series, resolved once.
type Resource struct {
	EventsReceived       compbasemetrics.CounterMetric
	EventsDispatched     compbasemetrics.CounterMetric
	TerminatedWatchers   compbasemetrics.CounterMetric
	Initializations      compbasemetrics.CounterMetric
	InitializationErrors compbasemetrics.CounterMetric
	InitDuration         compbasemetrics.ObserverMetric
	InitEvents           compbasemetrics.CounterMetric
	ReadWait             compbasemetrics.ObserverMetric
	// shardedWatches and shardFiltered are upstream's
	// apiserver_watch_shards_total and apiserver_watch_filtered_events_total
	// (registered by upstream while ShardedListAndWatch is on).
	shardedWatches compbasemetrics.GaugeMetric
	ShardFiltered  compbasemetrics.CounterMetric
	GR             schema.GroupResource

	BookmarksSent                              compbasemetrics.CounterMetric
	StorageBookmarks                           compbasemetrics.CounterMetric
	TickDuration                               compbasemetrics.ObserverMetric
	WatchersDue                                compbasemetrics.ObserverMetric
	HistoryEvents                              compbasemetrics.GaugeMetric
	HistoryForcedEvictions                     compbasemetrics.CounterMetric
	ExpiredWatches                             compbasemetrics.CounterMetric
	Backfilled, BackfillFailed, BackfillTooFar compbasemetrics.CounterMetric
	FreshnessTimeouts                          map[string]compbasemetrics.CounterMetric
	FreshnessProbes                            compbasemetrics.CounterMetric
	ProgressRequests                           compbasemetrics.CounterMetric
	ProgressAnswer                             compbasemetrics.ObserverMetric
	StorageWatchRetries                        compbasemetrics.CounterMetric
	Dropped                                    map[string]compbasemetrics.CounterMetric
	byState                                    [3]compbasemetrics.GaugeMetric
	NotReady                                   map[string]compbasemetrics.CounterMetric
	ReadsToStorage                             map[StorageRead]compbasemetrics.CounterMetric
	SlowWatchers                               map[string]compbasemetrics.CounterMetric
	Budget                                     Budget
}

// Outcomes of a slow watcher, for slow_watchers_total.
const (
	SlowStalled         = "stalled"
	SlowResumed         = "resumed"
	SlowClosed          = "closed_unresponsive"
	SlowPositionExpired = "closed_position_expired"
)

// SlowWatcher counts what became of a watcher that fell behind.
func (m *Resource) SlowWatcher(outcome string) { m.SlowWatchers[outcome].Inc() }

// NewResource resolves gr's series, registering the families on first
// use; backfillCooldown goes into the backfills' help.
func NewResource(gr schema.GroupResource, backfillCooldown time.Duration) *Resource {
	registerMetrics(backfillCooldown)
	g, r := gr.Group, gr.Resource
	m := &Resource{
		EventsReceived:         upstream.EventsReceivedCounter.WithLabelValues(g, r),
		EventsDispatched:       upstream.EventsCounter.WithLabelValues(g, r),
		TerminatedWatchers:     upstream.TerminatedWatchersCounter.WithLabelValues(g, r),
		Initializations:        upstream.WatchCacheInitializations.WithLabelValues(g, r),
		InitializationErrors:   upstream.WatchCacheInitializationErrors.WithLabelValues(g, r),
		InitDuration:           upstream.WatchCacheInitializationDuration.WithLabelValues(g, r),
		InitEvents:             upstream.InitCounter.WithLabelValues(g, r),
		ReadWait:               upstream.WatchCacheReadWait.WithLabelValues(g, r),
		shardedWatches:         upstream.WatchShardsTotal.WithLabelValues(g, r),
		ShardFiltered:          upstream.WatchFilteredEventsTotal.WithLabelValues(g, r),
		GR:                     gr,
		BookmarksSent:          bookmarksSent.WithLabelValues(g, r),
		StorageBookmarks:       storageBookmarks.WithLabelValues(g, r),
		TickDuration:           tickDuration.WithLabelValues(g, r),
		WatchersDue:            watchersDue.WithLabelValues(g, r),
		HistoryEvents:          historyEvents.WithLabelValues(g, r),
		HistoryForcedEvictions: historyForcedEvictions.WithLabelValues(g, r),
		ExpiredWatches:         expiredWatches.WithLabelValues(g, r),
		Backfilled:             backfills.WithLabelValues(g, r, "filled"),
		BackfillFailed:         backfills.WithLabelValues(g, r, "failed"),
		BackfillTooFar:         backfills.WithLabelValues(g, r, "too_far"),
		FreshnessTimeouts:      map[string]compbasemetrics.CounterMetric{},
		FreshnessProbes:        freshnessProbes.WithLabelValues(g, r),
		ProgressRequests:       progressRequests.WithLabelValues(g, r),
		ProgressAnswer:         progressAnswer.WithLabelValues(g, r),
		StorageWatchRetries:    storageWatchRetries.WithLabelValues(g, r),
		Dropped:                map[string]compbasemetrics.CounterMetric{},
		NotReady:               map[string]compbasemetrics.CounterMetric{},
		ReadsToStorage:         map[StorageRead]compbasemetrics.CounterMetric{},
		SlowWatchers:           map[string]compbasemetrics.CounterMetric{},
		Budget:                 newBudget(g, r),
	}
	for _, outcome := range []string{SlowStalled, SlowResumed, SlowClosed, SlowPositionExpired} {
		m.SlowWatchers[outcome] = slowWatchers.WithLabelValues(g, r, outcome)
	}
	for _, why := range NotReadyReasons {
		m.NotReady[why] = notReady.WithLabelValues(g, r, why)
	}
	for _, read := range StorageReads {
		m.ReadsToStorage[read] = readsToStorage.WithLabelValues(g, r, read.verb, read.reason)
	}
	for _, what := range []string{DropEvent, DropMovedOut, DropInitialEvent, DropBookmark} {
		m.Dropped[what] = dropped.WithLabelValues(g, r, what)
	}
	for _, kind := range []string{RequestWatchList, RequestList} {
		m.FreshnessTimeouts[kind] = freshnessTimeouts.WithLabelValues(g, r, kind)
	}
	for _, s := range []watchlist.State{watchlist.WaitingForBookmark, watchlist.BookmarkReceived, watchlist.BookmarkSent} {
		m.byState[s] = watchersByState.WithLabelValues(g, r, s.String())
	}
	return m
}

// Kinds of request for freshness_timeouts_total.
const (
	RequestWatchList = "watchlist"
	RequestList      = "list"
)

// FreshnessTimedOut counts err when it is the freshness timeout.
func (m *Resource) FreshnessTimedOut(kind string, err error) {
	if storage.IsTooLargeResourceVersion(err) {
		m.FreshnessTimeouts[kind].Inc()
	}
}

// The fallback label of apiserver_watch_cache_consistent_read_total, as
// upstream sets it.
const (
	FallbackNo      = "false"
	FallbackYes     = "true"
	FallbackSkipped = "skipped" // ConsistentListFromCacheSkipTimeoutFallback refused it
)

// ConsistentRead counts a consistent list as upstream's
// apiserver_watch_cache_consistent_read_total does: served (success) or not,
// and whether it fell back to etcd.
func (m *Resource) ConsistentRead(success bool, fallback string) {
	upstream.ConsistentReadTotal.WithLabelValues(m.GR.Group, m.GR.Resource, strconv.FormatBool(success), fallback).Inc()
}

// Reasons of not_ready_total.
const (
	NotReadyRelist         = "relist"
	NotReadyStorageSilent  = "storage_silent"
	NotReadyStorageFailing = "storage_watch_failing"
	NotReadyStopped        = "stopped"
)

// NotReadyReasons are every reason of not_ready_total, each a series.
var NotReadyReasons = []string{NotReadyRelist, NotReadyStorageSilent, NotReadyStorageFailing, NotReadyStopped, NotReadyOverBudget}

// StorageRead is a kind of read the cache sends on to etcd: a series of
// reads_to_storage_total.
type StorageRead struct{ verb, reason string }

var (
	GetNotReady            = StorageRead{"get", "not_ready"}
	GetConsistent          = StorageRead{"get", "consistent"}
	ListNotReady           = StorageRead{"list", "not_ready"}
	ListDelegated          = StorageRead{"list", "delegated"}
	ListNoSnapshot         = StorageRead{"list", "no_snapshot"}
	ListConsistentFallback = StorageRead{"list", "consistent_fallback"}

	StorageReads = []StorageRead{GetNotReady, GetConsistent, ListNotReady, ListDelegated, ListNoSnapshot, ListConsistentFallback,
		GetOverBudget, ListOverBudget, WatchOverBudget}
)

// WentNotReady counts a transition from ready to not ready, for why.
func (m *Resource) WentNotReady(why string) { m.NotReady[why].Inc() }

// ReadToStorage counts a read sent on to etcd.
func (m *Resource) ReadToStorage(read StorageRead) { m.ReadsToStorage[read].Inc() }

// WatcherArrived counts a watcher registered in WatchList state s.
func (m *Resource) WatcherArrived(s watchlist.State, sharded bool) {
	m.byState[s].Inc()
	if sharded {
		m.shardedWatches.Inc()
	}
}

// WatcherLeft counts a watcher gone from WatchList state s.
func (m *Resource) WatcherLeft(s watchlist.State, sharded bool) {
	m.byState[s].Dec()
	if sharded {
		m.shardedWatches.Dec()
	}
}

// WatcherMoved counts a watcher moving between WatchList states.
func (m *Resource) WatcherMoved(from, to watchlist.State) {
	m.byState[from].Dec()
	m.byState[to].Inc()
}

// SetResourceVersion sets upstream's apiserver_watch_cache_resource_version.
func (m *Resource) SetResourceVersion(rv uint64) { upstream.RecordResourceVersion(m.GR, rv) }

// HistoryBoundChanged feeds upstream's apiserver_watch_cache_capacity and
// its increase/decrease counters: the history's bound follows upstream's
// rule, so the series mean the same.
func (m *Resource) HistoryBoundChanged(old, bound int) {
	upstream.RecordsWatchCacheCapacityChange(m.GR, old, bound)
}

// EveryInterval runs a function at most once per interval: for log lines
// that a storm would otherwise repeat thousands of times.
type EveryInterval struct {
	Interval time.Duration
	last     time.Time
}

// Do runs f unless it ran less than Interval before now.
func (e *EveryInterval) Do(now time.Time, f func()) {
	if !e.last.IsZero() && now.Sub(e.last) < e.Interval {
		return
	}
	e.last = now
	f()
}

// What the cache could not build for a client, by the label of
// watchkeeper_watch_cache_dropped_total.
const (
	DropEvent        = "event"            // a live event (the object's metadata unreadable)
	DropMovedOut     = "moved-out-delete" // the DELETED of an object that left a selector
	DropInitialEvent = "initial-event"    // an ADDED of a watch's initial state
	DropBookmark     = "bookmark"         // a bookmark or initial-events-end marker
)
