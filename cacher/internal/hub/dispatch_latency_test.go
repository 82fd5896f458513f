package hub

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachemetrics"
	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"
	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
)

// liveEvent is event i as the dispatcher sends it: a shared object with
// the times the event passed before fan-out.
func liveEvent(t *testing.T, i int, times objects.EventTimes) watch.Event {
	t.Helper()
	s, err := objects.Share(cachertest.NewPod(cachertest.PodName(i), uint64(100+i), nil, ""))
	if err != nil {
		t.Fatal(err)
	}
	s.Times = times
	return watch.Event{Type: watch.Modified, Object: s.ForWatcher()}
}

// Every delivery of a live event is observed in all five stages: the ones
// a client's channel takes at once from the dispatcher (observed together,
// once it handed out its batch) wait neither in the watcher's queue nor on
// the client; one queued behind a busy client has its wait split between
// the queue (watcher_queue_latency) and the send the pump is blocked in
// (watcher_to_client_handler). Initial events and bookmarks are not timed.
func TestEachDeliveryTimedByStage(t *testing.T) {
	w, wg, stop := newLoneWatcher(10)
	defer func() { close(stop); wg.Wait() }()
	clk := w.Env.Clock.(*testingclock.FakeClock)
	w.Env.Latency = &DispatchLatency{Stages: cachemetrics.NewResourceStages(schema.GroupResource{Resource: "pods"}, []int64{int64(time.Millisecond), int64(time.Second)})}
	stages := w.Env.Latency.Stages
	t0 := cachertest.Epoch.UnixNano()
	times := objects.EventTimes{Decoded: t0 - int64(3*time.Millisecond), Received: t0 - int64(2*time.Millisecond), Dispatched: t0 - int64(time.Millisecond)}

	// An initial event first: it is not timed.
	w.Start(t.Context(), []watch.Event{liveEvent(t, 0, objects.EventTimes{})})
	<-w.ResultChan()
	cachertest.Poll(t, "the initial event to be taken", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return !w.pumping
	})

	// resultBuffer deliveries of one event straight into the channel, as
	// the dispatcher hands a batch out and observes what was taken at once,
	// then two events behind it, and a bookmark.
	var objs [DispatchBatch]EventObjects
	objs[0] = EventObjects{
		Event: &objects.Event{Type: watch.Modified, RV: 101, Cur: objects.NewDecoded("/pods/ns/"+cachertest.PodName(1), cachertest.NewPod(cachertest.PodName(1), 101, nil, ""), nil, nil),
			DecodedNanos: times.Decoded, RecordedNanos: times.Received},
		DispatchedNanos: times.Dispatched,
	}
	var sels batchSelections
	sels[0] = SelectsCur | selectsPrev
	var atOnce [DispatchBatch]uint32
	for i := range ResultBuffer {
		if !w.deliverBatch(&sels, &objs, &atOnce, t0) {
			t.Fatalf("delivery %d refused", i)
		}
	}
	if atOnce[0] != ResultBuffer {
		t.Fatalf("%d deliveries counted as taken at once, want %d", atOnce[0], ResultBuffer)
	}
	w.Env.Latency.sentAtOnce(objs[0].times(), atOnce[0], t0)
	for i := range 2 {
		if !w.deliver(liveEvent(t, 2+i, times), t0) {
			t.Fatalf("queued event %d refused", i)
		}
	}
	w.deliver(watch.Event{Type: watch.Bookmark, Object: liveEvent(t, 99, times).Object}, t0)
	const busy = 2 * time.Second
	clk.Step(busy)
	for range ResultBuffer + 3 {
		<-w.ResultChan()
	}
	const deliveries = ResultBuffer + 2
	cachertest.Poll(t, "the pump to send the queued events", func() bool {
		n, _ := stages.Count(cachemetrics.StageTotal)
		return n == deliveries
	})

	for stage, wantSum := range map[int]time.Duration{
		cachemetrics.StageStorageToCache: deliveries * time.Millisecond,
		cachemetrics.StageCacherQueue:    deliveries * time.Millisecond,
		// Queued twice for busy: the first waited in the pump's send or the
		// queue (the pump took it before or after the clock moved), the
		// second in the queue.
		cachemetrics.StageTotal: deliveries*3*time.Millisecond + 2*busy,
	} {
		if n, sum := stages.Count(stage); n != deliveries || sum != wantSum {
			t.Errorf("%s: %d observed, sum %v, want %d and %v", cachemetrics.StageLabels[stage], n, sum, deliveries, wantSum)
		}
	}
	queueN, queueSum := stages.Count(cachemetrics.StageWatcherQueue)
	sendN, sendSum := stages.Count(cachemetrics.StageWatcherToClient)
	if queueN != deliveries || sendN != deliveries {
		t.Errorf("watcher stages observed %d and %d times, want %d each", queueN, sendN, deliveries)
	}
	if queueSum+sendSum != 2*busy || queueSum < busy {
		t.Errorf("watcher_queue_latency sum %v, watcher_to_client_handler sum %v: want them %v in all, the queue at least %v", queueSum, sendSum, 2*busy, busy)
	}
	// The deliveries taken at once are in the first bucket of both.
	if n := stages.Stages[cachemetrics.StageWatcherQueue].Counts[0].Load(); n < ResultBuffer {
		t.Errorf("watcher_queue_latency has %d in its first bucket, want the %d deliveries taken at once", n, ResultBuffer)
	}
}
