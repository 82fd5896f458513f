package cacher

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
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

// BenchmarkDispatchExactKeyWatchers is the kubelet shape: watchers of one
// object each (by name, not recursive), spread over 10,000 objects, and one
// write to a random object per op. The index by key makes a write cost the
// watchers of that object, not all of them.
func BenchmarkDispatchExactKeyWatchers(b *testing.B) {
	const objects = 10_000
	for _, watchers := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("watchers=%d", watchers), func(b *testing.B) {
			var pods []*example.Pod
			for i := range objects {
				pods = append(pods, newTestPod(podName(i), 100, nil, ""))
			}
			fs := newFakeStorage(100, pods...)
			c := newTestCacher(b, fs, nil)
			if err := c.WaitReady(context.Background()); err != nil {
				b.Fatal(err)
			}
			var delivered atomic.Int64
			for i := range watchers {
				w, err := c.Watch(context.Background(), "/pods/"+pods[i%objects].Namespace+"/"+pods[i%objects].Name,
					storage.ListOptions{ResourceVersion: "100", Predicate: everything(false)})
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
			objs := make([]*object, objects)
			var err error
			for i, p := range pods {
				if objs[i], err = c.newObject(p); err != nil {
					b.Fatal(err)
				}
			}
			d := c.newDispatcher()
			b.ReportAllocs()
			b.ResetTimer()
			rv := uint64(100)
			for i := 0; b.Loop(); i++ {
				rv++
				o := objs[(i*7919)%objects]
				d.dispatch(&event{typ: watch.Modified, rv: rv, cur: o, prev: o})
			}
			b.StopTimer()
			b.ReportMetric(float64(watchers)/objects, "watchers/write")
		})
	}
}

// BenchmarkSnapshotMemory: 10,000 objects, 10 writes a second over a 75s
// window (750 writes, each a snapshot), on the fake clock: the heap the
// snapshots keep beyond the store and the history, per snapshot and in
// all. Run it with and without the gate to see the difference:
// go test -run XXX -bench SnapshotMemory -benchtime 1x ./cacher/
func BenchmarkSnapshotMemory(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("ListFromCacheSnapshot=%v", on), func(b *testing.B) {
			featuregatetesting.SetFeatureGateDuringTest(b, utilfeature.DefaultFeatureGate, features.ListFromCacheSnapshot, on)
			var pods []*example.Pod
			for i := range 10_000 {
				pods = append(pods, newTestPod(fmt.Sprintf("pod-%05d", i), 100, nil, "node1"))
			}
			fs := newFakeStorage(100, pods...)
			c := newTestCacher(b, fs, func(cfg *Config) { cfg.EventsHistoryWindow = 75 * time.Second })
			if err := c.WaitReady(context.Background()); err != nil {
				b.Fatal(err)
			}
			sw, _ := fs.waitWatch(b, 1)
			heap := func() uint64 {
				var m runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&m)
				return m.HeapAlloc
			}
			for b.Loop() {
				before := heap()
				rv := uint64(100)
				for i := range 750 {
					rv++
					sw.send(b, watch.Modified, newTestPod(fmt.Sprintf("pod-%05d", (i*7919)%10_000), rv, map[string]string{"i": fmt.Sprint(i)}, "node1"))
					if i%10 == 9 {
						c.clk.Step(time.Second)
					}
				}
				poll(b, "the writes to be applied", func() bool { return c.state.currentRV() >= rv })
				b.ReportMetric(float64(heap()-before)/(1<<20), "MiB-kept")
				c.state.mu.RLock()
				b.ReportMetric(float64(c.state.snapshots.len()), "snapshots")
				b.ReportMetric(float64(len(c.state.snapshots.checkpoints)), "clones")
				c.state.mu.RUnlock()
			}
		})
	}
}

// BenchmarkListAfterWrites lists 10,000 objects at RV "0" from a cache that
// got them by 10,000 watch events, with and without ListFromCacheSnapshot:
// the list walks the same tree either way; what differs is the heap the
// clones kept per write add for the collector.
func BenchmarkListAfterWrites(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("snapshots=%v", on), func(b *testing.B) {
			featuregatetesting.SetFeatureGateDuringTest(b, utilfeature.DefaultFeatureGate, features.ListFromCacheSnapshot, on)
			fs := newFakeStorage(100)
			c := newTestCacher(b, fs, nil)
			c.WaitReady(context.Background())
			sw, _ := fs.waitWatch(b, 1)
			for i := range 10_000 {
				sw.send(b, watch.Added, newTestPod(fmt.Sprintf("pod-%05d", i), uint64(101+i), map[string]string{"app": "web"}, "node1"))
			}
			poll(b, "applied", func() bool { return c.state.currentRV() >= 10_100 })
			opts := storage.ListOptions{ResourceVersion: "0", Recursive: true, Predicate: everything(false)}
			b.ResetTimer()
			for b.Loop() {
				list := &example.PodList{}
				if err := c.GetList(context.Background(), "/pods/", opts, list); err != nil || len(list.Items) != 10_000 {
					b.Fatal(err, len(list.Items))
				}
			}
		})
	}
}

// BenchmarkListPastRV lists 10,000 objects written by events at an RV 30
// creates back, the bench's exact-RV list, whole and in pages of 500
// (kubectl's) followed to the end: the lists the snapshots serve; and, to
// compare, the current state at RV "0".
func BenchmarkListPastRV(b *testing.B) {
	featuregatetesting.SetFeatureGateDuringTest(b, utilfeature.DefaultFeatureGate, features.ListFromCacheSnapshot, true)
	fs := newFakeStorage(100)
	c := newTestCacher(b, fs, nil)
	c.WaitReady(context.Background())
	sw, _ := fs.waitWatch(b, 1)
	const n, later = 10_000, 30
	for i := range n + later {
		sw.send(b, watch.Added, newTestPod(fmt.Sprintf("pod-%05d", i), uint64(101+i), map[string]string{"app": "web"}, "node1"))
	}
	poll(b, "applied", func() bool { return c.state.currentRV() >= 100+n+later })
	rv := fmt.Sprint(100 + n)
	b.Run("rv0", func(b *testing.B) {
		opts := storage.ListOptions{ResourceVersion: "0", Recursive: true, Predicate: everything(false)}
		b.ReportAllocs()
		for b.Loop() {
			list := &example.PodList{}
			if err := c.GetList(context.Background(), "/pods/", opts, list); err != nil || len(list.Items) != n+later {
				b.Fatal(err, len(list.Items))
			}
		}
	})
	b.Run("exact", func(b *testing.B) {
		opts := storage.ListOptions{ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchExact, Recursive: true, Predicate: everything(false)}
		b.ReportAllocs()
		for b.Loop() {
			list := &example.PodList{}
			if err := c.GetList(context.Background(), "/pods/", opts, list); err != nil || len(list.Items) != n {
				b.Fatal(err, len(list.Items))
			}
		}
	})
	b.Run("pages", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			got, token := 0, ""
			for first := true; first || token != ""; first = false {
				pred := everything(false)
				pred.Limit, pred.Continue = 500, token
				opts := storage.ListOptions{Recursive: true, Predicate: pred}
				if first {
					opts.ResourceVersion, opts.ResourceVersionMatch = rv, metav1.ResourceVersionMatchExact
				}
				list := &example.PodList{}
				if err := c.GetList(context.Background(), "/pods/", opts, list); err != nil {
					b.Fatal(err)
				}
				got, token = got+len(list.Items), list.Continue
			}
			if got != n {
				b.Fatalf("listed %d", got)
			}
		}
	})
}
