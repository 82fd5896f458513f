package cacher

import (
	"time"

	"k8s.io/apimachinery/pkg/watch"
	upstream "k8s.io/apiserver/pkg/storage/cacher/metrics"
)

// Upstream's apiserver_watch_events_dispatch_duration_seconds, by stage, from
// the times an event passes: decoded by the etcd3 store (it stamps each
// event when the cache asks it to, ListOptions.RecordTimestamps), applied
// by the cache (event.recordedNanos), taken by the dispatcher, and sent to
// a client's channel. The stages of one event (storage_to_cache,
// cacher_queue_latency) are observed once per event; total once per
// delivery, as upstream does. watchkeeper has no per-watcher input queue:
// an event waits only behind a busy client, and that wait is part of total
// (watcher_queue_latency and watcher_to_client_handler are not observed).
type dispatchLatency struct {
	obs *upstream.WatcherMetricsObservers
}

func nanosTime(n int64) time.Time { return time.Unix(0, n) }

// dispatched observes the stages before fan-out of e, which the dispatcher
// took at startNanos.
func (l *dispatchLatency) dispatched(e *event, startNanos int64) {
	if l == nil || l.obs == nil || e.recordedNanos == 0 {
		return
	}
	var tl upstream.DispatchTimeline
	if e.decodedNanos != 0 {
		tl.MarkAt(upstream.PointStorageDecoded, nanosTime(e.decodedNanos))
	}
	tl.MarkAt(upstream.PointCacheReceived, nanosTime(e.recordedNanos))
	tl.MarkAt(upstream.PointDispatchStarted, nanosTime(startNanos))
	l.obs.ObserveTimeline(&tl)
}

// sent observes total for an event a client's channel took at nowNanos:
// only live events carry their decode time (initial events and bookmarks
// are not timed, as upstream's are not).
func (l *dispatchLatency) sent(ev watch.Event, nowNanos int64) {
	if l == nil || l.obs == nil {
		return
	}
	o, ok := ev.Object.(*cacheableObject)
	if !ok || o.shared.decodedNanos == 0 {
		return
	}
	var tl upstream.DispatchTimeline
	tl.MarkAt(upstream.PointStorageDecoded, nanosTime(o.shared.decodedNanos))
	tl.MarkAt(upstream.PointSentToClient, nanosTime(nowNanos))
	l.obs.ObserveTimeline(&tl)
}
