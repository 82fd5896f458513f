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
)

// BenchmarkListFromCache lists 10,000 cached pods at RV "0", as the bench's
// list scenario does through the storage interface.
func BenchmarkListFromCache(b *testing.B) {
	var pods []*example.Pod
	for i := range 10_000 {
		pods = append(pods, newTestPod(fmt.Sprintf("pod-%05d", i), uint64(10+i), map[string]string{"app": "web"}, "node1"))
	}
	fs := newFakeStorage(20_000, pods...)
	c := newTestCacher(b, fs, nil)
	if err := c.WaitReady(context.Background()); err != nil {
		b.Fatal(err)
	}
	opts := storage.ListOptions{ResourceVersion: "0", Recursive: true, Predicate: everything(false)}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		list := &example.PodList{}
		if err := c.GetList(context.Background(), "/pods/", opts, list); err != nil {
			b.Fatal(err)
		}
		if len(list.Items) != 10_000 {
			b.Fatalf("listed %d", len(list.Items))
		}
	}
}

// BenchmarkDispatch hands one event to 1,000 watchers whose clients read
// everything: the dispatcher's cost per event (op = one event).
func BenchmarkDispatch(b *testing.B) {
	fs := newFakeStorage(100)
	c := newTestCacher(b, fs, nil)
	if err := c.WaitReady(context.Background()); err != nil {
		b.Fatal(err)
	}
	for range 1000 {
		w, err := c.Watch(context.Background(), "/pods/", storage.ListOptions{ResourceVersion: "100", Recursive: true, Predicate: everything(false)})
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			for range w.ResultChan() {
			}
		}()
		defer w.Stop()
	}
	pod := newTestPod("a", 101, nil, "")
	obj, err := c.newObject(pod)
	if err != nil {
		b.Fatal(err)
	}
	d := c.newDispatcher()
	b.ReportAllocs()
	b.ResetTimer()
	rv := uint64(101)
	for b.Loop() {
		rv++
		d.dispatch(&event{typ: watch.Modified, rv: rv, cur: obj, prev: obj})
	}
}

// BenchmarkBookmarkTick files 100,000 reading watchers with bookmarks over a
// one-minute period and runs the tick once per fake second: each tick hands
// out the ~1,667 bookmarks due. op = one bookmark delivered (tick included).
func BenchmarkBookmarkTick(b *testing.B) {
	const watchers = 100_000
	fs := newFakeStorage(100)
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
		w, err := c.Watch(context.Background(), "/pods/", storage.ListOptions{ResourceVersion: "100", Recursive: true, Predicate: everything(true)})
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
	var due [][]*watcher
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
		due = c.tick(100, due)
	}
}
