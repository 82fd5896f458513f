package httpbench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
	"github.com/watchkeeper/watchkeeper/internal/histogram"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/v1alpha1"
	clientset "github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/generated/clientset/versioned"
)

const (
	fanoutWatchTimeout = time.Hour
	// fanoutWriters write concurrently, as several controllers would; each
	// owns its objects, so no write conflicts with another.
	fanoutWriters = 4
	// objectsPerWriter: the first write of each is a create, the rest
	// updates, so both kinds of event are in the stream.
	objectsPerWriter = 8
	drainPoll        = 20 * time.Millisecond
	// pacedEventsPerSecond is the load of the fan-out's second phase: writes
	// at a fixed rate, watchers x rate events a second, below what either
	// cache delivers flat out on two cores (75-150k), so its latency is that
	// of an event at the same load for both rather than the queue a
	// closed-loop writer builds (see FanOut).
	pacedEventsPerSecond = 50_000
	// pacedWritesMax bounds the second phase: at 1,000 watches, 10s of
	// writes.
	pacedWritesMax = 500
)

// drainStall is how long the run waits with no event arriving before it
// gives up on the ones still missing (they are reported as undelivered).
func drainStall(env Env) time.Duration {
	if env.Quick {
		return 5 * time.Second
	}
	return 15 * time.Second
}

// FanOut opens watchers watches on widgets, then makes events writes of
// widgets, each stamped with its wall time, and reports how fast and how
// late the watchers got them and what the server spent per delivered
// event. Every watch that ends on its own while its consumer still reads
// is counted in watchers_closed.
//
// Those writers are closed-loop (each writes again as soon as the server
// answers), so the run is flat out and its latency is mostly the queue of
// events that load builds, which grows as the server answers writes
// faster: a cache that delivers more events a second gets writes in faster
// too. A second phase then writes at a fixed rate (pacedEventsPerSecond),
// the same offered load for both caches, and reports its latency apart
// (paced_latency_*).
func FanOut(ctx context.Context, env Env, decorator string, watchers, events int) ([]result.Result, error) {
	if watchers <= 0 || events <= 0 {
		return nil, fmt.Errorf("fanout: watchers = %d, events = %d, want both > 0", watchers, events)
	}
	rec := result.NewRecorder("fanout", Level, decorator, map[string]int{"watchers": watchers, "events": events})
	err := withServer(ctx, env, "fanout", decorator, func(s *serverProcess) error {
		cs, rv, err := s.clientAtWidgetsRV(ctx)
		if err != nil {
			return err
		}
		latency := &histogram.Histogram{}
		ws, err := openWatches(ctx, s, watchSpec{path: widgetsPath, resourceVersion: rv, timeout: fanoutWatchTimeout}, watchers, latency)
		if err != nil {
			return err
		}
		defer ws.stop()
		if err := sleepCtx(ctx, settle(env)); err != nil {
			return err
		}

		cpu0, err := s.CPUSeconds()
		if err != nil {
			return err
		}
		start := time.Now()
		profiled := profileServer(ctx, s, env.ServerCPUProfile)
		if err := writeWidgets(ctx, cs, events); err != nil {
			return err
		}
		expected := int64(watchers) * int64(events)
		cpu1, err := waitDelivered(ctx, s, ws, expected, drainStall(env))
		if err != nil {
			return err
		}
		if err := <-profiled; err != nil {
			return err
		}
		delivered := ws.objects.Load()
		last := time.Unix(0, ws.lastReceipt.Load())

		// The paced phase, on objects of its own, once the first drained.
		paced := min(events, pacedWritesMax)
		rate := max(1, pacedEventsPerSecond/watchers)
		ws.pacedFrom.Store(time.Now().UnixNano())
		if err := writeWidgetsPaced(ctx, cs, paced, rate); err != nil {
			return err
		}
		if _, err := waitDelivered(ctx, s, ws, delivered+int64(watchers)*int64(paced), drainStall(env)); err != nil {
			return err
		}
		closed := ws.closed.Load()
		ws.stop()
		s.noteCloses(ws)
		if delivered == 0 {
			return fmt.Errorf("no event reached any of %d watchers (closed: %d %s)", watchers, closed, ws.closeSummary())
		}

		d := float64(delivered)
		rec.Add("events_delivered_per_second", d/last.Sub(start).Seconds(), "events/s", result.Higher)
		rec.Add("latency_p50", durationMillis(latency.Quantile(0.50)), "ms", result.Lower)
		rec.Add("latency_p99", durationMillis(latency.Quantile(0.99)), "ms", result.Lower)
		rec.Add("server_cpu_us_per_event", (cpu1-cpu0)/d*1e6, "us", result.Lower)
		rec.Add("events_delivered", d, "events", result.Higher)
		rec.Add("events_undelivered", float64(expected-delivered), "events", result.Lower)
		rec.Add("watchers_closed", float64(closed), "watchers", result.Lower)
		rec.Add("paced_latency_p50", durationMillis(ws.paced.Quantile(0.50)), "ms", result.Lower)
		rec.Add("paced_latency_p99", durationMillis(ws.paced.Quantile(0.99)), "ms", result.Lower)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return rec.Results(), nil
}

func durationMillis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// waitDelivered waits until the watchers got expected events, or none came
// for stall. It returns the server's CPU time read right after the last
// event that came, so the idle wait for stragglers is not billed to the
// events.
func waitDelivered(ctx context.Context, s *serverProcess, ws *watchSet, expected int64, stall time.Duration) (float64, error) {
	t := time.NewTicker(drainPoll)
	defer t.Stop()
	prev := int64(-1)
	var cpuAtProgress float64
	lastProgress := time.Now()
	for {
		cpu, err := s.CPUSeconds()
		if err != nil {
			return 0, err
		}
		cur := ws.objects.Load()
		if cur != prev {
			prev, cpuAtProgress, lastProgress = cur, cpu, time.Now()
		}
		if cur >= expected || time.Since(lastProgress) > stall {
			return cpuAtProgress, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-t.C:
		}
	}
}

// writeWidgets makes events writes split among fanoutWriters concurrent
// writers and returns when all are answered.
func writeWidgets(ctx context.Context, cs clientset.Interface, events int) error {
	return runWriters(ctx, cs, events, 0, 0)
}

// writeWidgetsPaced makes events writes at rate a second, split among
// fanoutWriters writers of their own objects (ids after writeWidgets').
// Each writer keeps its share of the rate on a clock of its own, so a
// slow answer delays only the next write of that writer.
func writeWidgetsPaced(ctx context.Context, cs clientset.Interface, events, rate int) error {
	return runWriters(ctx, cs, events, fanoutWriters, time.Duration(fanoutWriters)*time.Second/time.Duration(rate))
}

// runWriters splits events among fanoutWriters writers numbered from
// firstID, each writing every interval (0: as fast as answered).
func runWriters(ctx context.Context, cs clientset.Interface, events, firstID int, interval time.Duration) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var firstErr error
	var once sync.Once
	for w := range min(fanoutWriters, events) {
		n := events / fanoutWriters
		if w < events%fanoutWriters {
			n++
		}
		wg.Go(func() {
			if err := writer(wctx, cs, firstID+w, n, interval); err != nil {
				once.Do(func() {
					firstErr = err
					cancel()
				})
			}
		})
	}
	wg.Wait()
	return firstErr
}

// writer makes n writes over its own objectsPerWriter widgets: a create for
// each first, then updates from the last version it got back, so no write
// conflicts. Each write carries its wall time in writtenAtAnnotation, set
// just before the request goes.
func writer(ctx context.Context, cs clientset.Interface, id, n int, interval time.Duration) error {
	widgets := cs.DemoV1alpha1().Widgets(benchNamespace)
	objs := make([]*v1alpha1.Widget, objectsPerWriter)
	colors := []v1alpha1.WidgetColor{v1alpha1.WidgetColorRed, v1alpha1.WidgetColorGreen, v1alpha1.WidgetColorBlue}
	next := time.Now()
	for j := range n {
		if interval > 0 {
			if err := sleepCtx(ctx, time.Until(next)); err != nil {
				return err
			}
			next = next.Add(interval)
		}
		k := j % objectsPerWriter
		var err error
		if objs[k] == nil {
			w := &v1alpha1.Widget{
				ObjectMeta: metav1.ObjectMeta{
					Name:   fmt.Sprintf("w%d-%d", id, k),
					Labels: map[string]string{"app": "bench", "writer": strconv.Itoa(id)},
				},
				Spec: v1alpha1.WidgetSpec{Size: 1, Color: colors[k%len(colors)], NodeName: fmt.Sprintf("node-%d", k)},
			}
			w.Annotations = map[string]string{writtenAtAnnotation: strconv.FormatInt(time.Now().UnixNano(), 10)}
			objs[k], err = widgets.Create(ctx, w, metav1.CreateOptions{})
		} else {
			w := objs[k].DeepCopy()
			w.Spec.Size = int32(j%1000) + 1
			w.Annotations[writtenAtAnnotation] = strconv.FormatInt(time.Now().UnixNano(), 10)
			objs[k], err = widgets.Update(ctx, w, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("writer %d, write %d: %w", id, j, err)
		}
	}
	return nil
}
