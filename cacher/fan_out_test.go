package cacher

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"
	"github.com/watchkeeper/watchkeeper/cacher/internal/hub"
	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
)

// BenchmarkDispatch hands one event to 1,000 watchers whose clients read
// everything: the dispatcher's cost per event (op = one event).
func BenchmarkDispatch(b *testing.B) {
	fs := cachertest.NewFakeStorage(100)
	c := newTestCacher(b, fs, nil)
	if err := c.WaitReady(context.Background()); err != nil {
		b.Fatal(err)
	}
	for range 1000 {
		w, err := c.Watch(context.Background(), "/pods/", storage.ListOptions{ResourceVersion: "100", Recursive: true, Predicate: cachertest.Everything(false)})
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			for range w.ResultChan() {
			}
		}()
		defer w.Stop()
	}
	pod := cachertest.NewPod("a", 101, nil, "")
	obj, err := c.feed.NewObject(pod)
	if err != nil {
		b.Fatal(err)
	}
	d := c.loop.NewDispatcher()
	b.ReportAllocs()
	b.ResetTimer()
	rv := uint64(101)
	for b.Loop() {
		rv++
		d.Dispatch(&objects.Event{Type: watch.Modified, RV: rv, Cur: obj, Prev: obj})
	}
}

// BenchmarkBookmarkTick files 100,000 reading watchers with bookmarks over a
// one-minute period and runs the tick once per fake second: each tick hands
// out the ~1,667 bookmarks due. op = one bookmark delivered (tick included).
func BenchmarkBookmarkTick(b *testing.B) {
	const watchers = 100_000
	fs := cachertest.NewFakeStorage(100)
	// newTestCacher's schedule: a minute in one-second slots, fake clock.
	c := newTestCacher(b, fs, nil)
	clk := c.clk
	if err := c.WaitReady(context.Background()); err != nil {
		b.Fatal(err)
	}
	var got atomic.Int64
	for i := range watchers {
		if i%(watchers/60) == 0 {
			clk.Step(time.Second) // spread the watchers over the period
		}
		w, err := c.Watch(context.Background(), "/pods/", storage.ListOptions{ResourceVersion: "100", Recursive: true, Predicate: cachertest.Everything(true)})
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			for range w.ResultChan() {
				got.Add(1)
			}
		}()
		defer w.Stop()
	}
	var due [][]*hub.Watcher
	// -cpuprofile would mostly show the 100,000 Watch calls above: set
	// WATCHKEEPER_TICK_PROFILE to profile the ticks alone.
	if path := os.Getenv("WATCHKEEPER_TICK_PROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	b.ResetTimer()
	for got.Load() < int64(b.N) {
		clk.Step(time.Second)
		due = c.loop.Tick(100, due)
	}
}

// BenchmarkDispatchExactKeyWatchers is the kubelet shape: watchers of one
// object each (by name, not recursive), spread over 10,000 objects, and one
// write to a random object per op. The index by key makes a write cost the
// watchers of that object, not all of them.
func BenchmarkDispatchExactKeyWatchers(b *testing.B) {
	const nObjects = 10_000
	for _, watchers := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("watchers=%d", watchers), func(b *testing.B) {
			var pods []*example.Pod
			for i := range nObjects {
				pods = append(pods, cachertest.NewPod(cachertest.PodName(i), 100, nil, ""))
			}
			fs := cachertest.NewFakeStorage(100, pods...)
			c := newTestCacher(b, fs, nil)
			if err := c.WaitReady(context.Background()); err != nil {
				b.Fatal(err)
			}
			var delivered atomic.Int64
			for i := range watchers {
				w, err := c.Watch(context.Background(), "/pods/"+pods[i%nObjects].Namespace+"/"+pods[i%nObjects].Name,
					storage.ListOptions{ResourceVersion: "100", Predicate: cachertest.Everything(false)})
				if err != nil {
					b.Fatal(err)
				}
				go func() {
					for range w.ResultChan() {
						delivered.Add(1)
					}
				}()
				defer w.Stop()
			}
			objs := make([]*objects.Object, nObjects)
			var err error
			for i, p := range pods {
				if objs[i], err = c.feed.NewObject(p); err != nil {
					b.Fatal(err)
				}
			}
			d := c.loop.NewDispatcher()
			b.ReportAllocs()
			b.ResetTimer()
			rv := uint64(100)
			for i := 0; b.Loop(); i++ {
				rv++
				o := objs[(i*7919)%nObjects]
				d.Dispatch(&objects.Event{Type: watch.Modified, RV: rv, Cur: o, Prev: o})
			}
			b.StopTimer()
			b.ReportMetric(float64(watchers)/nObjects, "watchers/write")
		})
	}
}
