package cacher

import (
	"context"
	"fmt"
	"maps"
	"math/rand"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"
	"github.com/watchkeeper/watchkeeper/cacher/internal/state"
)

// TestSnapshotsServeEveryState lists at every RV the cache applied, whole,
// in pages and with a selector, after a random run of additions, updates,
// deletions (some of keys the cache never held) and transactions of
// several events at one RV, and compares each with the state a model kept:
// a state between two checkpoints is a checkpoint with later events
// undone, and must be exactly what the cache held at that RV. None of
// these lists may reach etcd.
func TestSnapshotsServeEveryState(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.ListFromCacheSnapshot, true)
	const listRV = 100
	model := map[string]string{} // name -> its labels v (the version) and app, "v/app"
	var pods []*example.Pod
	for i := range 20 {
		name := fmt.Sprintf("pod-%03d", i)
		model[name] = "0/" + cachertest.WebOrNot(i)
		pods = append(pods, cachertest.NewPod(name, listRV, map[string]string{"v": "0", "app": cachertest.WebOrNot(i)}, ""))
	}
	fs := cachertest.NewFakeStorage(listRV, pods...)
	c := newTestCacher(t, fs, nil)
	c.waitReady(t)
	sw, _ := fs.WaitWatch(t, 1)

	states := map[uint64]map[string]string{listRV: maps.Clone(model)}
	rng := rand.New(rand.NewSource(1))
	rv := uint64(listRV)
	for step := range 5 * state.CheckpointEvery * 3 {
		// Now and then a transaction: several events at one RV.
		if step == 0 || rng.Intn(5) != 0 {
			rv++
		}
		name := fmt.Sprintf("pod-%03d", rng.Intn(40))
		v := strconv.Itoa(step + 1)
		app := cachertest.WebOrNot(rng.Intn(2))
		pod := cachertest.NewPod(name, rv, map[string]string{"v": v, "app": app}, "")
		_, exists := model[name]
		switch {
		case exists && rng.Intn(3) == 0, !exists && rng.Intn(6) == 0:
			// A deletion; of a key the cache does not hold, too.
			sw.Send(t, watch.Deleted, pod)
			delete(model, name)
		case exists:
			sw.Send(t, watch.Modified, pod)
			model[name] = v + "/" + app
		default:
			sw.Send(t, watch.Added, pod)
			model[name] = v + "/" + app
		}
		states[rv] = maps.Clone(model)
	}
	c.waitRV(t, rv)
	listsBefore := fs.ListCount()

	for at := uint64(listRV); at <= rv; at++ {
		want := states[at]
		got := listedAt(t, c, at, 0, cachertest.Everything(false))
		if !maps.Equal(got, want) {
			t.Fatalf("exact list at RV %d: got %v, want %v", at, got, want)
		}
		if got := listedAt(t, c, at, 7, cachertest.Everything(false)); !maps.Equal(got, want) {
			t.Fatalf("pages of 7 at RV %d: got %v, want %v", at, got, want)
		}
		web := map[string]string{}
		for name, va := range want {
			if strings.HasSuffix(va, "/web") {
				web[name] = va
			}
		}
		if got := listedAt(t, c, at, 3, cachertest.WebPods()); !maps.Equal(got, web) {
			t.Fatalf("pages of 3 of the web pods at RV %d: got %v, want %v", at, got, web)
		}
	}
	if n := fs.ListCount() - listsBefore; n != 0 {
		t.Errorf("%d lists went to etcd; every state is in memory", n)
	}
}

// listedAt lists the pods at exactly rv, following continue tokens when
// limit is set, and returns name -> "v/app" labels; the RV of every page
// must be rv.
func listedAt(t *testing.T, c *testCacher, rv uint64, limit int64, pred storage.SelectionPredicate) map[string]string {
	t.Helper()
	out := map[string]string{}
	var names []string
	pred.Limit = limit
	for {
		list := &example.PodList{}
		opts := storage.ListOptions{ResourceVersion: strconv.FormatUint(rv, 10), ResourceVersionMatch: metav1.ResourceVersionMatchExact, Recursive: true, Predicate: pred}
		if pred.Continue != "" {
			opts.ResourceVersion, opts.ResourceVersionMatch = "", ""
		}
		if err := c.GetList(context.Background(), "/pods/", opts, list); err != nil {
			t.Fatalf("list at RV %d: %v", rv, err)
		}
		if list.ResourceVersion != strconv.FormatUint(rv, 10) {
			t.Fatalf("list at RV %d answered at RV %s", rv, list.ResourceVersion)
		}
		for _, p := range list.Items {
			out[p.Name] = p.Labels["v"] + "/" + p.Labels["app"]
			names = append(names, p.Name)
		}
		if pred.Continue = list.Continue; pred.Continue == "" {
			break
		}
		if int64(len(list.Items)) != limit {
			t.Fatalf("a page of %d at RV %d with more to come", len(list.Items), rv)
		}
	}
	if !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != len(names) {
		t.Fatalf("list at RV %d not in key order or repeats a key: %v", rv, names)
	}
	return out
}

// TestSnapshotListsDuringWrites lists the current state and past states
// while events are applied: the clones are walked without the lock, which
// the race detector checks, and every list is one state, in key order.
func TestSnapshotListsDuringWrites(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.ListFromCacheSnapshot, true)
	fs := cachertest.NewFakeStorage(100)
	c := newTestCacher(t, fs, nil)
	c.waitReady(t)
	sw, _ := fs.WaitWatch(t, 1)
	const writes = 20 * state.CheckpointEvery
	done := make(chan struct{})
	errs := make(chan error, 2)
	for _, exact := range []bool{false, true} {
		go func() {
			for {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				opts := storage.ListOptions{ResourceVersion: "0", Recursive: true, Predicate: cachertest.Everything(false)}
				if rv := c.state.CurrentRV(); exact && rv > 105 {
					opts.ResourceVersion, opts.ResourceVersionMatch = strconv.FormatUint(rv-5, 10), metav1.ResourceVersionMatchExact
				}
				list := &example.PodList{}
				if err := c.GetList(context.Background(), "/pods/", opts, list); err != nil {
					errs <- err
					return
				}
				// Pod i is added at RV 101+i: a list at RV r holds pods 0..r-101.
				rv, _ := strconv.ParseUint(list.ResourceVersion, 10, 64)
				if want := int(rv) - 100; len(list.Items) != want {
					errs <- fmt.Errorf("list at RV %d (exact %v) holds %d pods, want %d", rv, exact, len(list.Items), want)
					return
				}
				for i, p := range list.Items {
					if p.Name != fmt.Sprintf("pod-%05d", i) {
						errs <- fmt.Errorf("list at RV %d: item %d is %s", rv, i, p.Name)
						return
					}
				}
			}
		}()
	}
	for i := range writes {
		sw.Send(t, watch.Added, cachertest.NewPod(fmt.Sprintf("pod-%05d", i), uint64(101+i), nil, ""))
	}
	c.waitRV(t, 100+writes)
	close(done)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
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
				pods = append(pods, cachertest.NewPod(fmt.Sprintf("pod-%05d", i), 100, nil, "node1"))
			}
			fs := cachertest.NewFakeStorage(100, pods...)
			c := newTestCacher(b, fs, func(cfg *Config) { cfg.EventsHistoryWindow = 75 * time.Second })
			if err := c.WaitReady(context.Background()); err != nil {
				b.Fatal(err)
			}
			sw, _ := fs.WaitWatch(b, 1)
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
					sw.Send(b, watch.Modified, cachertest.NewPod(fmt.Sprintf("pod-%05d", (i*7919)%10_000), rv, map[string]string{"i": fmt.Sprint(i)}, "node1"))
					if i%10 == 9 {
						c.clk.Step(time.Second)
					}
				}
				cachertest.Poll(b, "the writes to be applied", func() bool { return c.state.CurrentRV() >= rv })
				b.ReportMetric(float64(heap()-before)/(1<<20), "MiB-kept")
				snapshots, clones := c.state.SnapshotCounts()
				b.ReportMetric(float64(snapshots), "snapshots")
				b.ReportMetric(float64(clones), "clones")
			}
		})
	}
}
