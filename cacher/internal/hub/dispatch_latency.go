package hub

import (
	"k8s.io/apimachinery/pkg/watch"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachemetrics"
	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
)

// DispatchLatency feeds apiserver_watch_events_dispatch_duration_seconds
// (dispatch_stages.go): all five stages once per delivery of a live event,
// as v0.38's cache watcher observes them; initial events and bookmarks are
// not timed.
//
// The points, in UnixNano: decoded by the etcd3 store (it stamps each
// event when the cache asks it to, ListOptions.RecordTimestamps; 0 when it
// did not), applied by the cache, taken by the dispatcher (objects.EventTimes,
// shared by every delivery of the event), then per delivery: queued for
// the watcher, taken off that queue, sent to the client's channel.
// watchkeeper queues an event for a watcher only while its client is busy
// (the pump); an event the client's channel takes at once is queued,
// dequeued and sent at the dispatcher's one clock reading for the batch,
// so its watcher_queue_latency and watcher_to_client_handler are 0, as
// upstream's are for a client that keeps up. Nothing is built per watcher
// after the queue (the object is shared and encoded once), so the event is
// built when it is dequeued.
type DispatchLatency struct {
	Stages *cachemetrics.ResourceStages
}

// timedObject is ev's shared object if ev is a live event.
func timedObject(ev watch.Event) *objects.SharedObject {
	if ev.Type == watch.Bookmark {
		return nil
	}
	o, ok := ev.Object.(*objects.CacheableObject)
	if !ok || !o.Shared.Times.Live() {
		return nil
	}
	return o.Shared
}

// sent observes one delivery of ev, queued for the watcher at queuedNanos,
// taken off its queue at dequeuedNanos, taken by the client's channel at
// sentNanos.
func (l *DispatchLatency) sent(ev watch.Event, queuedNanos, dequeuedNanos, sentNanos int64) {
	if l == nil {
		return
	}
	if s := timedObject(ev); s != nil {
		l.Stages.Observe(s.Times, queuedNanos, dequeuedNanos, sentNanos, 1)
	}
}

// sentAtOnce observes n deliveries of an event that passed t, which
// clients' channels took straight from the dispatcher at nowNanos: the
// dispatcher counts them over its batch (dispatcher.atOnce) and observes
// them in one step, as they share every point.
func (l *DispatchLatency) sentAtOnce(t objects.EventTimes, n uint32, nowNanos int64) {
	if l == nil {
		return
	}
	l.Stages.Observe(t, nowNanos, nowNanos, nowNanos, uint64(n))
}
