package httpbench

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/v1alpha1"
	clientset "github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/generated/clientset/versioned"
)

const (
	// bookmarkWatchSlack puts every watch's deadline, and so its
	// pre-deadline bookmark, well past the measured period: only the
	// periodic bookmarks are counted.
	bookmarkWatchSlack = 10 * time.Minute
	clockTick          = time.Second
)

// Bookmarks keeps watchers idle watches on widgets open for period while a
// writer updates a gadget every second, and reports the bookmarks the
// clients got and what the server spent. The gadget writes move etcd's
// revision without touching widgets: upstream's cache sends no bookmark
// while the resourceVersion stands still, and that is not what is measured
// here. The bookmark frequency is the server's default (1m), so a period
// shorter than that may see none; CPU per 1,000 bookmarks is then left out.
func Bookmarks(ctx context.Context, env Env, decorator string, watchers int, period time.Duration) ([]result.Result, error) {
	if watchers <= 0 || period <= 0 {
		return nil, fmt.Errorf("bookmarks: watchers = %d, period = %v, want both > 0", watchers, period)
	}
	rec := newRecorder("bookmarks", decorator, map[string]int{"watchers": watchers, "period_seconds": int(period / time.Second)})
	err := withServer(ctx, env, "bookmarks", decorator, func(s *serverProcess) error {
		cs, err := s.typedClient()
		if err != nil {
			return err
		}
		clock, err := cs.DemoV1alpha1().Gadgets().Create(ctx, &v1alpha1.Gadget{
			ObjectMeta: metav1.ObjectMeta{Name: "bench-clock"},
			Spec:       v1alpha1.GadgetSpec{Owner: "bench"},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating the clock gadget: %w", err)
		}
		rv, err := currentWidgetsRV(ctx, cs)
		if err != nil {
			return err
		}
		ws, err := openWatches(ctx, s, watchSpec{path: widgetsPath, resourceVersion: rv, timeout: period + bookmarkWatchSlack}, watchers, nil)
		if err != nil {
			return err
		}
		defer ws.stop()

		wctx, stopWriter := context.WithCancel(ctx)
		var writer sync.WaitGroup
		var writerErr error
		writer.Go(func() { writerErr = tickGadget(wctx, cs, clock) })
		defer func() {
			stopWriter()
			writer.Wait()
		}()

		cpu0, err := s.sampleCPU()
		if err != nil {
			return err
		}
		b0, t0 := ws.bookmarks.Load(), time.Now()
		if err := sleepCtx(ctx, period); err != nil {
			return err
		}
		cpu1, err := s.sampleCPU()
		if err != nil {
			return err
		}
		b1, elapsed := ws.bookmarks.Load(), time.Since(t0)
		stopWriter()
		writer.Wait()
		if writerErr != nil {
			return writerErr
		}
		closed := ws.closed.Load()
		ws.stop()
		s.noteCloses(ws)

		bookmarks, cpu := float64(b1-b0), cpu1-cpu0
		rec.add("bookmarks_delivered", bookmarks, "bookmarks", higher)
		rec.add("bookmarks_per_watcher", bookmarks/float64(watchers), "bookmarks", higher)
		rec.add("cpu_seconds_per_1k_bookmarks", cpu/(bookmarks/1000), "s", lower)
		rec.add("cpu_seconds_per_second", cpu/elapsed.Seconds(), "s/s", lower)
		rec.add("watchers_closed", float64(closed), "watchers", lower)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return rec.out, nil
}

// tickGadget updates g every clockTick until ctx ends. Each update is a
// new etcd revision.
func tickGadget(ctx context.Context, cs clientset.Interface, g *v1alpha1.Gadget) error {
	t := time.NewTicker(clockTick)
	defer t.Stop()
	for n := int32(1); ; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		g = g.DeepCopy()
		// A change, or the apiserver skips the write as a no-op.
		replicas := n
		g.Spec.Replicas = &replicas
		next, err := cs.DemoV1alpha1().Gadgets().Update(ctx, g, metav1.UpdateOptions{})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("updating the clock gadget: %w", err)
		}
		g = next
	}
}
