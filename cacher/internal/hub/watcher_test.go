package hub

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"
	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
	"github.com/watchkeeper/watchkeeper/watchlist"
)

// newLoneWatcher is a watcher with no cache around it: what it needs is
// given (WatcherEnv), and forgetting it terminates it.
func newLoneWatcher(buffer int) (*Watcher, *sync.WaitGroup, chan struct{}) {
	var wg sync.WaitGroup
	stop := make(chan struct{})
	w := &Watcher{Result: make(chan watch.Event, ResultBuffer), Tracker: watchlist.NewTracker(0)}
	w.Env = &WatcherEnv{
		Clock: testingclock.NewFakeClock(cachertest.Epoch), Buffer: buffer, Stop: stop, WG: &wg,
		Forget:   func(w *Watcher, graceful bool) { w.Terminate() },
		Moved:    func(from, to watchlist.State) {},
		Bookmark: func(uint64) (kruntime.Object, error) { return nil, fmt.Errorf("no bookmarks here") },
		Dropped:  func(string, uint64, error, ...any) {},
	}
	return w, &wg, stop
}

func podEvent(i int) watch.Event {
	return watch.Event{Type: watch.Modified, Object: cachertest.NewPod(cachertest.PodName(i), uint64(100+i), nil, "")}
}

// Handed straight to the channel while it has room, queued behind it (a
// pump delivering) up to the buffer, refused beyond: the caller then closes
// the watcher. Everything accepted arrives in order, and the pump ends
// with the queue.
func TestWatcherAloneDeliversInOrderWithinItsBuffer(t *testing.T) {
	const buffer = 3
	w, wg, _ := newLoneWatcher(buffer)
	now := cachertest.Epoch.UnixNano()
	for i := range ResultBuffer + buffer {
		if !w.deliver(podEvent(i), now) {
			t.Fatalf("event %d refused with room left", i)
		}
	}
	if w.deliver(podEvent(ResultBuffer+buffer), now) {
		t.Fatalf("event %d accepted beyond the channel and the buffer", ResultBuffer+buffer)
	}
	for i := range ResultBuffer + buffer {
		ev := <-w.ResultChan()
		if got := cachertest.EventRV(t, ev); got != uint64(100+i) {
			t.Fatalf("event %d arrived at RV %d, want %d", i, got, 100+i)
		}
	}
	wg.Wait() // the pump ended with its queue
	w.Stop()
	select {
	case ev, ok := <-w.ResultChan():
		if ok {
			t.Fatalf("got %s after Stop, want the channel closed", cachertest.Describe(ev))
		}
	case <-time.After(cachertest.WaitFor):
		t.Fatal("the channel is open after Stop")
	}
}

// A client that takes nothing for slowClientTimeout is refused the next
// event even with room in the buffer; one that keeps taking is not.
func TestWatcherAloneSlowClientTimeout(t *testing.T) {
	w, wg, stop := newLoneWatcher(100)
	now := cachertest.Epoch.UnixNano()
	for i := range ResultBuffer + 1 { // one queued behind a full channel
		w.deliver(podEvent(i), now)
	}
	later := now + int64(SlowClientTimeout)
	if !w.deliver(podEvent(50), later) {
		t.Fatalf("refused exactly at the timeout")
	}
	if w.deliver(podEvent(51), later+int64(time.Nanosecond)) {
		t.Fatalf("accepted an event past the timeout although the client took nothing")
	}
	close(stop) // the cache stopping ends the pump blocked on the client
	wg.Wait()

	// A client that takes an event while its queue waits starts the timeout
	// again: long after the queue filled, it is still given more.
	w, wg, stop = newLoneWatcher(100)
	for i := range ResultBuffer + 2 { // two queued behind a full channel
		w.deliver(podEvent(i), now)
	}
	<-w.ResultChan()
	cachertest.Poll(t, "the pump to hand the client a queued event", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.taken == 1
	})
	if !w.deliver(podEvent(52), later+int64(5*time.Second)) {
		t.Errorf("refused an event %v after the queue filled, although the client has taken one since", SlowClientTimeout+5*time.Second)
	}
	close(stop)
	wg.Wait()
}

// The dispatcher alone: it hands an event to the candidates that want it
// (key, selector, not already covered by their start), counts what it
// handed over, and reports a watcher whose buffer is full as too slow.
func TestDispatcherAlone(t *testing.T) {
	all, _, _ := newLoneWatcher(100)
	all.Key, all.Recursive, all.Pred, all.StartRV = "/pods/", true, cachertest.Everything(false), 100
	other, _, _ := newLoneWatcher(100)
	other.Key, other.Pred, other.StartRV = "/pods/ns/other", cachertest.Everything(false), 100
	late, _, _ := newLoneWatcher(100)
	// Started from a state at the event's RV: it has the event already.
	late.Key, late.Recursive, late.Pred, late.StartRV = "/pods/", true, cachertest.Everything(false), 150
	full, _, _ := newLoneWatcher(0)
	full.Key, full.Recursive, full.Pred, full.StartRV = "/pods/", true, cachertest.Everything(false), 100
	for i := range ResultBuffer { // its channel is full, and it may queue nothing
		full.deliver(podEvent(i), cachertest.Epoch.UnixNano())
	}
	var slow []*Watcher
	dispatched := 0
	d := &Dispatcher{Env: DispatchEnv{
		Clock:      testingclock.NewFakeClock(cachertest.Epoch),
		Candidates: func(dst []*Watcher, _ *objects.Event) []*Watcher { return append(dst, all, other, late, full) },
		Objects: func(e *objects.Event, _ int64) EventObjects {
			return EventObjects{Event: e, Versioner: storage.APIObjectVersioner{}, Dropped: func(string, uint64, error, ...any) {}}
		},
		TooSlow:    func(w *Watcher) { slow = append(slow, w) },
		Dispatched: func() { dispatched++ },
	}}
	pod := cachertest.NewPod("a", 150, nil, "")
	key, _ := cachertest.PodKey(pod)
	cur := objects.NewDecoded(key, pod, labels.Set{}, fields.Set{})
	d.Dispatch(&objects.Event{Type: watch.Added, RV: 150, Cur: cur})
	if dispatched != 1 || len(slow) != 1 || slow[0] != full {
		t.Fatalf("counted %d events dispatched, %d watchers too slow; want 1 (once per event) and the full one", dispatched, len(slow))
	}
	if ev := <-all.ResultChan(); ev.Type != watch.Added || cachertest.EventRV(t, ev) != 150 {
		t.Fatalf("got %s, want ADDED a@150", cachertest.Describe(ev))
	}
	for name, w := range map[string]*Watcher{"another key": other, "started at the event's RV": late} {
		select {
		case ev := <-w.ResultChan():
			t.Errorf("%s: got %s, want nothing", name, cachertest.Describe(ev))
		default:
		}
	}
	if d.RV != 150 {
		t.Errorf("dispatcher RV %d, want 150", d.RV)
	}
}

// Events waiting together are dispatched as a batch: each watcher gets its
// share at once, in RV order, only the events it wants, and one that
// cannot take them is reported too slow once; a later batch does not
// mistake a watcher for one met before.
func TestDispatcherBatch(t *testing.T) {
	newWatcher := func(key string, recursive bool, startRV uint64, buffer int) *Watcher {
		w, _, _ := newLoneWatcher(buffer)
		w.Key, w.Recursive, w.Pred, w.StartRV = key, recursive, cachertest.Everything(false), startRV
		return w
	}
	all := newWatcher("/pods/", true, 100, 100)
	onlyB := newWatcher("/pods/ns/b", false, 100, 100)
	late := newWatcher("/pods/", true, 151, 100) // has the state at 151
	full := newWatcher("/pods/", true, 100, 0)
	for i := range ResultBuffer - 1 { // room for one more event, and no queue
		full.deliver(podEvent(i), cachertest.Epoch.UnixNano())
	}
	watchers := []*Watcher{all, onlyB, late, full}
	var slow []*Watcher
	dispatched := 0
	d := &Dispatcher{Env: DispatchEnv{
		Clock:      testingclock.NewFakeClock(cachertest.Epoch),
		Candidates: func(dst []*Watcher, _ *objects.Event) []*Watcher { return append(dst, watchers...) },
		Objects: func(e *objects.Event, _ int64) EventObjects {
			return EventObjects{Event: e, Versioner: storage.APIObjectVersioner{}, Dropped: func(string, uint64, error, ...any) {}}
		},
		TooSlow:    func(w *Watcher) { slow = append(slow, w) },
		Dispatched: func() { dispatched++ },
	}}
	obj := func(name string, rv uint64) *objects.Object {
		pod := cachertest.NewPod(name, rv, nil, "")
		key, _ := cachertest.PodKey(pod)
		return objects.NewDecoded(key, pod, labels.Set{}, fields.Set{})
	}
	d.Dispatch(
		&objects.Event{Type: watch.Added, RV: 150, Cur: obj("a", 150)},
		&objects.Event{Type: watch.Added, RV: 151, Cur: obj("b", 151)},
		&objects.Event{Type: watch.Modified, RV: 152, Cur: obj("a", 152), Prev: obj("a", 150)},
		&objects.Event{Type: watch.Bookmark, RV: 153},
		&objects.Event{Type: watch.Deleted, RV: 154, Prev: obj("b", 151), Cur: obj("b", 154)},
	)
	// The progress at 153 moves the RV and is not counted (1.38's
	// apiserver_watch_cache_events_dispatched_total).
	if dispatched != 4 || d.RV != 154 {
		t.Errorf("counted %d events dispatched, dispatcher RV %d; want 4 and 154", dispatched, d.RV)
	}
	if len(slow) != 1 || slow[0] != full {
		t.Errorf("too slow: %d watchers, want the full one once", len(slow))
	}
	for name, c := range map[string]struct {
		w    *Watcher
		want []string
	}{
		"all":         {all, []string{"ADDED a@150", "ADDED b@151", "MODIFIED a@152", "DELETED b@154"}},
		"only b":      {onlyB, []string{"ADDED b@151", "DELETED b@154"}},
		"from 151 on": {late, []string{"MODIFIED a@152", "DELETED b@154"}},
	} {
		if got := cachertest.ReceivedAll(c.w); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s got %v, want %v", name, got, c.want)
		}
	}

	// The next batch, the candidates in another order: onlyB's slot from
	// the first batch is where late now stands.
	watchers = []*Watcher{all, late, onlyB}
	d.Dispatch(
		&objects.Event{Type: watch.Modified, RV: 155, Cur: obj("a", 155), Prev: obj("a", 152)},
		&objects.Event{Type: watch.Added, RV: 156, Cur: obj("b", 156)},
	)
	for name, c := range map[string]struct {
		w    *Watcher
		want []string
	}{
		"all":         {all, []string{"MODIFIED a@155", "ADDED b@156"}},
		"only b":      {onlyB, []string{"ADDED b@156"}},
		"from 151 on": {late, []string{"MODIFIED a@155", "ADDED b@156"}},
	} {
		if got := cachertest.ReceivedAll(c.w); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("second batch: %s got %v, want %v", name, got, c.want)
		}
	}
}
