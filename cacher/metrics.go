package cacher

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
	backfills = compbasemetrics.NewCounterVec(&compbasemetrics.CounterOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "history_backfills_total",
		Help: fmt.Sprintf("Backfills of the history from etcd for watches resuming from before the cache's list, by result: filled, failed. "+
			"For %v after a failure, such resumes get 410 Expired at once (expired_watches_total) rather than wait on another.", backfillCooldown),
		StabilityLevel: compbasemetrics.ALPHA,
	}, []string{"group", "resource", "result"})
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
			"the retry window), stopped.",
		StabilityLevel: compbasemetrics.ALPHA,
	}, []string{"group", "resource", "reason"})
	readsToStorage = compbasemetrics.NewCounterVec(&compbasemetrics.CounterOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "reads_to_storage_total",
		Help: "Gets and lists the cache sent on to the wrapped storage (etcd) instead of serving them, by verb (get, list) " +
			"and reason: not_ready (the cache was not ready), consistent (a get with resourceVersion \"\"), delegated (a list " +
			"the cache does not serve, as upstream's delegator decides), no_snapshot (an exact-resourceVersion or continued " +
			"list whose state the snapshots no longer hold), consistent_fallback (a consistent list the cache could not " +
			"catch up for).",
		StabilityLevel: compbasemetrics.ALPHA,
	}, []string{"group", "resource", "verb", "reason"})

	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() {
		upstream.Register()
		if c := dispatchStages.register(); c != nil {
			legacyregistry.Registerer().MustRegister(c)
		}
		for _, m := range []compbasemetrics.Registerable{
			bookmarksSent, storageBookmarks, tickDuration, watchersDue, watchersByState,
			historyEvents, historyForcedEvictions, expiredWatches, backfills, freshnessTimeouts, freshnessProbes,
			storageWatchRetries, dropped, notReady, readsToStorage,
		} {
			legacyregistry.MustRegister(m)
		}
	})
}

// resourceMetrics are one resource's series, resolved once.
type resourceMetrics struct {
	eventsReceived       compbasemetrics.CounterMetric
	eventsDispatched     compbasemetrics.CounterMetric
	terminatedWatchers   compbasemetrics.CounterMetric
	initializations      compbasemetrics.CounterMetric
	initializationErrors compbasemetrics.CounterMetric
	initDuration         compbasemetrics.ObserverMetric
	initEvents           compbasemetrics.CounterMetric
	readWait             compbasemetrics.ObserverMetric
	// shardedWatches and shardFiltered are upstream's
	// apiserver_watch_shards_total and apiserver_watch_filtered_events_total
	// (registered by upstream while ShardedListAndWatch is on).
	shardedWatches compbasemetrics.GaugeMetric
	shardFiltered  compbasemetrics.CounterMetric
	gr             schema.GroupResource

	bookmarksSent              compbasemetrics.CounterMetric
	storageBookmarks           compbasemetrics.CounterMetric
	tickDuration               compbasemetrics.ObserverMetric
	watchersDue                compbasemetrics.ObserverMetric
	historyEvents              compbasemetrics.GaugeMetric
	historyForcedEvictions     compbasemetrics.CounterMetric
	expiredWatches             compbasemetrics.CounterMetric
	backfilled, backfillFailed compbasemetrics.CounterMetric
	freshnessTimeouts          map[string]compbasemetrics.CounterMetric
	freshnessProbes            compbasemetrics.CounterMetric
	storageWatchRetries        compbasemetrics.CounterMetric
	dropped                    map[string]compbasemetrics.CounterMetric
	byState                    [3]compbasemetrics.GaugeMetric
	notReady                   map[string]compbasemetrics.CounterMetric
	readsToStorage             map[storageRead]compbasemetrics.CounterMetric
}

func newResourceMetrics(gr schema.GroupResource) *resourceMetrics {
	registerMetrics()
	g, r := gr.Group, gr.Resource
	m := &resourceMetrics{
		eventsReceived:         upstream.EventsReceivedCounter.WithLabelValues(g, r),
		eventsDispatched:       upstream.EventsCounter.WithLabelValues(g, r),
		terminatedWatchers:     upstream.TerminatedWatchersCounter.WithLabelValues(g, r),
		initializations:        upstream.WatchCacheInitializations.WithLabelValues(g, r),
		initializationErrors:   upstream.WatchCacheInitializationErrors.WithLabelValues(g, r),
		initDuration:           upstream.WatchCacheInitializationDuration.WithLabelValues(g, r),
		initEvents:             upstream.InitCounter.WithLabelValues(g, r),
		readWait:               upstream.WatchCacheReadWait.WithLabelValues(g, r),
		shardedWatches:         upstream.WatchShardsTotal.WithLabelValues(g, r),
		shardFiltered:          upstream.WatchFilteredEventsTotal.WithLabelValues(g, r),
		gr:                     gr,
		bookmarksSent:          bookmarksSent.WithLabelValues(g, r),
		storageBookmarks:       storageBookmarks.WithLabelValues(g, r),
		tickDuration:           tickDuration.WithLabelValues(g, r),
		watchersDue:            watchersDue.WithLabelValues(g, r),
		historyEvents:          historyEvents.WithLabelValues(g, r),
		historyForcedEvictions: historyForcedEvictions.WithLabelValues(g, r),
		expiredWatches:         expiredWatches.WithLabelValues(g, r),
		backfilled:             backfills.WithLabelValues(g, r, "filled"),
		backfillFailed:         backfills.WithLabelValues(g, r, "failed"),
		freshnessTimeouts:      map[string]compbasemetrics.CounterMetric{},
		freshnessProbes:        freshnessProbes.WithLabelValues(g, r),
		storageWatchRetries:    storageWatchRetries.WithLabelValues(g, r),
		dropped:                map[string]compbasemetrics.CounterMetric{},
		notReady:               map[string]compbasemetrics.CounterMetric{},
		readsToStorage:         map[storageRead]compbasemetrics.CounterMetric{},
	}
	for _, why := range notReadyReasons {
		m.notReady[why] = notReady.WithLabelValues(g, r, why)
	}
	for _, read := range storageReads {
		m.readsToStorage[read] = readsToStorage.WithLabelValues(g, r, read.verb, read.reason)
	}
	for _, what := range []string{dropEvent, dropMovedOut, dropInitialEvent, dropBookmark} {
		m.dropped[what] = dropped.WithLabelValues(g, r, what)
	}
	for _, kind := range []string{requestWatchList, requestList} {
		m.freshnessTimeouts[kind] = freshnessTimeouts.WithLabelValues(g, r, kind)
	}
	for _, s := range []watchlist.State{watchlist.WaitingForBookmark, watchlist.BookmarkReceived, watchlist.BookmarkSent} {
		m.byState[s] = watchersByState.WithLabelValues(g, r, s.String())
	}
	return m
}

// Kinds of request for freshness_timeouts_total.
const (
	requestWatchList = "watchlist"
	requestList      = "list"
)

// freshnessTimedOut counts err when it is the freshness timeout.
func (m *resourceMetrics) freshnessTimedOut(kind string, err error) {
	if storage.IsTooLargeResourceVersion(err) {
		m.freshnessTimeouts[kind].Inc()
	}
}

// The fallback label of apiserver_watch_cache_consistent_read_total, as
// upstream sets it.
const (
	fallbackNo      = "false"
	fallbackYes     = "true"
	fallbackSkipped = "skipped" // ConsistentListFromCacheSkipTimeoutFallback refused it
)

// consistentRead counts a consistent list as upstream's
// apiserver_watch_cache_consistent_read_total does: served (success) or not,
// and whether it fell back to etcd.
func (m *resourceMetrics) consistentRead(success bool, fallback string) {
	upstream.ConsistentReadTotal.WithLabelValues(m.gr.Group, m.gr.Resource, strconv.FormatBool(success), fallback).Inc()
}

// Reasons of not_ready_total.
const (
	notReadyRelist         = "relist"
	notReadyStorageSilent  = "storage_silent"
	notReadyStorageFailing = "storage_watch_failing"
	notReadyStopped        = "stopped"
)

// notReadyReasons are every reason of not_ready_total, each a series.
var notReadyReasons = []string{notReadyRelist, notReadyStorageSilent, notReadyStorageFailing, notReadyStopped}

// storageRead is a kind of read the cache sends on to etcd: a series of
// reads_to_storage_total.
type storageRead struct{ verb, reason string }

var (
	getNotReady            = storageRead{"get", "not_ready"}
	getConsistent          = storageRead{"get", "consistent"}
	listNotReady           = storageRead{"list", "not_ready"}
	listDelegated          = storageRead{"list", "delegated"}
	listNoSnapshot         = storageRead{"list", "no_snapshot"}
	listConsistentFallback = storageRead{"list", "consistent_fallback"}

	storageReads = []storageRead{getNotReady, getConsistent, listNotReady, listDelegated, listNoSnapshot, listConsistentFallback}
)

// wentNotReady counts a transition from ready to not ready, for why.
func (m *resourceMetrics) wentNotReady(why string) { m.notReady[why].Inc() }

// readToStorage counts a read sent on to etcd.
func (m *resourceMetrics) readToStorage(read storageRead) { m.readsToStorage[read].Inc() }

func (m *resourceMetrics) watcherArrived(s watchlist.State, sharded bool) {
	m.byState[s].Inc()
	if sharded {
		m.shardedWatches.Inc()
	}
}

func (m *resourceMetrics) watcherLeft(s watchlist.State, sharded bool) {
	m.byState[s].Dec()
	if sharded {
		m.shardedWatches.Dec()
	}
}
func (m *resourceMetrics) watcherMoved(from, to watchlist.State) {
	m.byState[from].Dec()
	m.byState[to].Inc()
}

func (m *resourceMetrics) setResourceVersion(rv uint64) { upstream.RecordResourceVersion(m.gr, rv) }

// historyBoundChanged feeds upstream's apiserver_watch_cache_capacity and
// its increase/decrease counters: the history's bound follows upstream's
// rule, so the series mean the same.
func (m *resourceMetrics) historyBoundChanged(old, bound int) {
	upstream.RecordsWatchCacheCapacityChange(m.gr, old, bound)
}

// everyInterval runs a function at most once per interval: for log lines
// that a storm would otherwise repeat thousands of times.
type everyInterval struct {
	interval time.Duration
	last     time.Time
}

func (e *everyInterval) Do(now time.Time, f func()) {
	if !e.last.IsZero() && now.Sub(e.last) < e.interval {
		return
	}
	e.last = now
	f()
}
