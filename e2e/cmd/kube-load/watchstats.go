package main

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/watchkeeper/watchkeeper/internal/histogram"
)

// stampAnnotation carries the time (Unix nanoseconds) at which the load
// client wrote an object; a watcher's latency is its arrival time minus it.
const stampAnnotation = "kube-load.watchkeeper.io/written"

// phase is the part of the run a count falls in.
type phase int32

const (
	phaseRamp    phase = iota // setting up: not measured
	phaseSteady               // the measured run, outside the restart's window
	phaseRestart              // from kube-apiserver's SIGTERM until 30s after it is ready again
	nPhases
)

// class is the kind of client a count belongs to.
type class int

const (
	classPods    class = iota // a kubelet's WatchList of its pods
	classNode                 // a kubelet's watch of its own Node
	classObjects              // a kubelet's per-object watches of secrets and configmaps
	classDriver               // the load driver's own cluster-wide informer of pods
	nClasses
)

var classNames = [nClasses]string{"kubelet pods", "kubelet node", "kubelet secrets/configmaps", "driver pods"}

// counters are the watch-side counts of one class in one phase.
type counters struct {
	initialLists  atomic.Int64 // initial lists completed (WatchList end bookmark, or a LIST)
	relists       atomic.Int64 // of which by a reflector that had synced before
	gone          atomic.Int64 // 410 Gone/Expired, as a watch's answer or an error event
	forbidden     atomic.Int64 // 403 (a kubelet's secret watch before the node authorizer's graph has the pod)
	otherErrors   atomic.Int64 // every other failed list or watch call, or error event
	endedByServer atomic.Int64 // watch streams that ended without the client stopping them
}

// stats is what every client of the run records into.
type stats struct {
	phase atomic.Int32
	c     [nClasses][nPhases]counters
	// Watch event latency, write to arrival, measured phases only.
	podLatency, objectLatency histogram.Histogram
	// storm is set from the start storm until the restart (or the run's
	// end), the API calls' storm phase: phase counts it as steady, the
	// latency by phase apart.
	storm atomic.Bool
	// The same latency per class and per phase of its arrival (steady,
	// storm, restart as the API calls' phases name them).
	latencyByPhase [nClasses][nAPIPhases]histogram.Histogram
	// Of those, the events written while the watch that delivered them
	// was open: at the restart, a resumed watch's catch-up on what was
	// written while the server was down counts above (its latency is the
	// downtime), where a relist learns the same writes in a list, which no
	// latency counts. These put the two caches' restarts side by side.
	liveByPhase [nClasses][nAPIPhases]histogram.Histogram
	// The same events of all kubelet watches that were written while
	// the watch that delivered them was open.
	live histogram.Histogram
	// Every write a kubelet learned after missing it, whichever way it
	// came: a watch event written before its watch opened (a resumed
	// watch catching up, also while the server held the call), or a
	// changed stamp on an object it knew, in a list or a WatchList's
	// initial events (a relist). The first is in the
	// latency above too, the others are not: this puts both caches' ways
	// of catching up side by side.
	catchUp histogram.Histogram
}

func (s *stats) now() phase { return phase(s.phase.Load()) }

// latencyPhase is the phase an event arriving now is timed in: the
// restart's window (phaseRestart), else the storm, else steady.
func (s *stats) latencyPhase() apiPhase {
	switch {
	case s.now() == phaseRestart:
		return apiRestart
	case s.storm.Load():
		return apiStorm
	default:
		return apiSteady
	}
}

func (s *stats) of(c class) *counters { return &s.c[c][s.now()] }

// sum adds a counter over classes and the given phases.
func (s *stats) sum(f func(*counters) *atomic.Int64, classes []class, phases ...phase) int64 {
	var n int64
	for _, c := range classes {
		for _, p := range phases {
			n += f(&s.c[c][p]).Load()
		}
	}
	return n
}

// countingLW is a reflector's ListerWatcher that counts what the reflector
// does and sees: initial lists, relists, 410s, errors, streams the server
// ended, and the latency of stamped MODIFIED events.
type countingLW struct {
	inner   cache.ListerWatcherWithContext
	st      *stats
	class   class
	latency *histogram.Histogram // nil: no latency for this watch
	// onSynced is called at each completed initial list.
	onSynced func(at time.Time, relist bool)
	// onWatch is called when a watch call succeeds.
	onWatch func(at time.Time)

	// clock is time.Now but in tests.
	clock func() time.Time

	synced atomic.Bool
	mu     sync.Mutex
	stamps map[string]string // object key -> last stamp this client saw
}

func newCountingLW(inner cache.ListerWatcherWithContext, st *stats, cl class, latency *histogram.Histogram) *countingLW {
	return &countingLW{inner: inner, st: st, class: cl, latency: latency, stamps: map[string]string{}, clock: time.Now}
}

func (lw *countingLW) List(options metav1.ListOptions) (runtime.Object, error) {
	return lw.ListWithContext(context.Background(), options)
}

func (lw *countingLW) Watch(options metav1.ListOptions) (watch.Interface, error) {
	return lw.WatchWithContext(context.Background(), options)
}

func (lw *countingLW) ListWithContext(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
	obj, err := lw.inner.ListWithContext(ctx, options)
	if err != nil {
		lw.countError(err)
		return nil, err
	}
	now := lw.clock()
	_ = meta.EachListItem(obj, func(o runtime.Object) error {
		lw.observe(watch.Event{Type: watch.Added, Object: o}, now, true, now)
		return nil
	})
	lw.synced1(now)
	return obj, nil
}

func (lw *countingLW) WatchWithContext(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
	w, err := lw.inner.WatchWithContext(ctx, options)
	if err != nil {
		lw.countError(err)
		return nil, err
	}
	// The watch is open when the call returns (the server answered): a
	// write made while the server held the call, as a resume waiting for
	// a backfill is, was missed like one made while the client was away.
	opened := lw.clock()
	if lw.onWatch != nil {
		lw.onWatch(opened)
	}
	initial := options.SendInitialEvents != nil && *options.SendInitialEvents
	return lw.wrap(w, initial, opened), nil
}

// synced1 counts one completed initial list.
func (lw *countingLW) synced1(at time.Time) {
	c := lw.st.of(lw.class)
	c.initialLists.Add(1)
	relist := lw.synced.Swap(true)
	if relist {
		c.relists.Add(1)
	}
	if lw.onSynced != nil {
		lw.onSynced(at, relist)
	}
}

func (lw *countingLW) countError(err error) {
	c := lw.st.of(lw.class)
	switch {
	case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
		c.gone.Add(1)
	case apierrors.IsForbidden(err):
		c.forbidden.Add(1)
	default:
		c.otherErrors.Add(1)
	}
}

// countingWatch forwards a watch's events after lw has looked at them.
type countingWatch struct {
	inner   watch.Interface
	out     chan watch.Event
	done    chan struct{}
	stopped atomic.Bool
	once    sync.Once
}

func (w *countingWatch) ResultChan() <-chan watch.Event { return w.out }

func (w *countingWatch) Stop() {
	w.once.Do(func() {
		w.stopped.Store(true)
		close(w.done)
		w.inner.Stop()
	})
}

// wrap forwards inner's events; opened is when the watch call returned.
func (lw *countingLW) wrap(inner watch.Interface, initial bool, opened time.Time) watch.Interface {
	w := &countingWatch{inner: inner, out: make(chan watch.Event), done: make(chan struct{})}
	go func() { // owned by w: ends when the stream ends or w is stopped
		defer close(w.out)
		inInitial := initial
		for {
			var ev watch.Event
			var ok bool
			select {
			case ev, ok = <-inner.ResultChan():
			case <-w.done:
				return
			}
			if !ok {
				if !w.stopped.Load() {
					lw.st.of(lw.class).endedByServer.Add(1)
				}
				return
			}
			now := lw.clock()
			switch ev.Type {
			case watch.Error:
				lw.countError(apierrors.FromObject(ev.Object))
			case watch.Bookmark:
				if inInitial {
					if m, err := meta.Accessor(ev.Object); err == nil && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
						inInitial = false
						lw.synced1(now)
					}
				}
			default:
				lw.observe(ev, now, inInitial, opened)
			}
			select {
			case w.out <- ev:
			case <-w.done:
				return
			}
		}
	}()
	return w
}

// observe records the latency of a MODIFIED event whose stamp this client
// has not seen yet on that object (a status write after the stamped write
// carries the same stamp: it is not counted again). A new stamp in a list
// or initial events (initial) is a write the client missed: it counts in
// catchUp only. opened is when the delivering watch call returned.
func (lw *countingLW) observe(ev watch.Event, now time.Time, initial bool, opened time.Time) {
	m, err := meta.Accessor(ev.Object)
	if err != nil {
		return
	}
	key := m.GetNamespace() + "/" + m.GetName()
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if ev.Type == watch.Deleted {
		delete(lw.stamps, key)
		return
	}
	stamp, ok := m.GetAnnotations()[stampAnnotation]
	if !ok || lw.stamps[key] == stamp {
		return
	}
	_, known := lw.stamps[key]
	lw.stamps[key] = stamp
	if lw.latency == nil || lw.st.now() == phaseRamp {
		return
	}
	ns, err := strconv.ParseInt(stamp, 10, 64)
	if err != nil {
		return
	}
	written := time.Unix(0, ns)
	d := now.Sub(written)
	if initial {
		// Only a stamp changed since this reflector last saw the object
		// is a write it missed: a new reflector's (the storm's) first
		// list, or an object new to it, says nothing of that.
		if known {
			lw.st.catchUp.Record(d)
		}
		return
	}
	if ev.Type != watch.Modified {
		return
	}
	lw.latency.Record(d)
	p := lw.st.latencyPhase()
	lw.st.latencyByPhase[lw.class][p].Record(d)
	if written.Before(opened) {
		lw.st.catchUp.Record(d)
	} else {
		lw.st.live.Record(d)
		lw.st.liveByPhase[lw.class][p].Record(d)
	}
}
