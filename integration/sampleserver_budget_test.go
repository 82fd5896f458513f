package integration

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/watchkeeper/watchkeeper/internal/testchild"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/v1alpha1"
	clientset "github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/generated/clientset/versioned"
)

// TestSampleServerBudgetOverAndBack: the memory budget through the API. The
// sample apiserver is given a budget for widgets of about 30 padded
// widgets (--watch-cache-resource-overrides ...:max-bytes=); a watch opened
// at 10 widgets stays open while they grow to 50 (over: lists and gets
// from etcd, correct) and shrink to 10 again (cached again), and reads
// every event in order, none twice, and the next one live; a client-go
// informer (WatchList) started beside it comes through both transitions on
// its first request, with no relist, holding etcd's widgets. The budget is
// measured at the default period (10s), so this takes about 30s.
func TestSampleServerBudgetOverAndBack(t *testing.T) {
	t.Parallel() // in a process of its own: the metrics are the process's
	if !testchild.Isolate(t) {
		return
	}
	const ns = "budget"
	pad := strings.Repeat("x", 1000)
	s := startSampleServer(t, "--watch-cache-resource-overrides=widgets.demo.watchkeeper.io:max-bytes=40Ki")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	widgets := s.Client.DemoV1alpha1().Widgets(ns)
	labels := map[string]string{"group": hostileGroup, "resource": "widgets"}
	gauge := func() float64 {
		v, _ := metricValue(t, "watchkeeper_watch_cache_over_budget", labels)
		return v
	}
	var rvs []uint64
	rvOf := func(w *v1alpha1.Widget) uint64 {
		rv, err := strconv.ParseUint(w.ResourceVersion, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return rv
	}
	create := func(i int) {
		w := ssWidget(ns, fmt.Sprintf("w-%02d", i))
		w.Annotations = map[string]string{"budget.watchkeeper.io/pad": pad}
		got, err := widgets.Create(ctx, w, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rvs = append(rvs, rvOf(got))
	}
	listed := func(want int) {
		t.Helper()
		list, err := widgets.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != want {
			t.Fatalf("listed %d widgets, want %d", len(list.Items), want)
		}
	}

	for i := range 10 {
		create(i)
	}
	listed(10)
	// An informer (client-go's WatchList) beside the plain watch: it must
	// come through both transitions on its first watch, with no relist.
	rec := &ssRecorder{}
	informerClient, err := clientset.NewForConfig(rec.wrap(s.Admin))
	if err != nil {
		t.Fatal(err)
	}
	informer := ssStartInformer(ctx, t, informerClient, ns)
	w, err := widgets.Watch(ctx, metav1.ListOptions{ResourceVersion: strconv.FormatUint(rvs[len(rvs)-1], 10)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	rvs = rvs[:0]

	for i := 10; i < 50; i++ {
		create(i)
	}
	waitHostile(t, time.Minute, "widgets over their budget at 50", func() (bool, string) {
		return gauge() == 1, fmt.Sprintf("over_budget %v", gauge())
	})
	listed(50)
	if got, err := widgets.Get(ctx, "w-42", metav1.GetOptions{ResourceVersion: "0"}); err != nil || got.Annotations["budget.watchkeeper.io/pad"] != pad {
		t.Fatalf("get over the budget: %v", err)
	}
	reads, _ := metricValue(t, "watchkeeper_watch_cache_reads_to_storage_total", map[string]string{"resource": "widgets", "verb": "list", "reason": "over_budget"})
	if reads < 1 {
		t.Errorf("lists over the budget did not go to etcd (reads_to_storage_total{over_budget} %v)", reads)
	}

	for i := 10; i < 50; i++ {
		name := fmt.Sprintf("w-%02d", i)
		if err := widgets.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitHostile(t, time.Minute, "widgets cached again at 10", func() (bool, string) {
		return gauge() == 0, fmt.Sprintf("over_budget %v", gauge())
	})
	listed(10)
	got, err := widgets.Get(ctx, "w-00", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	last := got.DeepCopy()
	last.Annotations["budget.watchkeeper.io/after"] = "1"
	if got, err = widgets.Update(ctx, last, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The watch: 40 ADDED, 40 DELETED, the last update; RVs rising (in
	// order, none twice), each deletion once.
	var added []uint64
	deleted := map[string]int{}
	var prev uint64
	limit := time.After(time.Minute)
	for {
		var ev watch.Event
		var ok bool
		select {
		case ev, ok = <-w.ResultChan():
		case <-limit:
			t.Fatalf("after %d ADDED and %d DELETED: no more events within a minute", len(added), len(deleted))
		}
		if !ok {
			t.Fatalf("the watch closed after %d ADDED and %d DELETED", len(added), len(deleted))
		}
		wd, isWidget := ev.Object.(*v1alpha1.Widget)
		if !isWidget {
			t.Fatalf("got %s %T", ev.Type, ev.Object)
		}
		rv := rvOf(wd)
		if rv <= prev {
			t.Fatalf("%s %s at %d after an event at %d: every event once, in order", ev.Type, wd.Name, rv, prev)
		}
		prev = rv
		switch ev.Type {
		case watch.Added:
			added = append(added, rv)
		case watch.Deleted:
			deleted[wd.Name]++
		}
		if ev.Type == watch.Modified && wd.Name == "w-00" {
			break
		}
	}
	if !slices.Equal(added, rvs) || len(deleted) != 40 || prev != rvOf(got) {
		t.Errorf("ADDED at %v, want %v; %d widgets DELETED, want 40; last at %d, want %d", added, rvs, len(deleted), prev, rvOf(got))
	}
	for name, n := range deleted {
		if n != 1 {
			t.Errorf("%s DELETED %d times", name, n)
		}
	}
	if v, _ := metricValue(t, "apiserver_terminated_watchers_total", labels); v != 0 {
		t.Errorf("%v watchers terminated, want 0", v)
	}

	// The informer holds what etcd holds, from the one WatchList it began
	// with.
	final, err := widgets.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, w := range final.Items {
		want[w.Name] = w.ResourceVersion
	}
	waitHostile(t, 30*time.Second, "the informer holds etcd's widgets", func() (bool, string) {
		got := map[string]string{}
		for _, obj := range informer.GetStore().List() {
			w := obj.(*v1alpha1.Widget)
			got[w.Name] = w.ResourceVersion
		}
		return maps.Equal(got, want), fmt.Sprintf("%d widgets, want %d", len(got), len(want))
	})
	var watchLists, others []string
	for _, r := range rec.requests() {
		if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/widgets") {
			continue
		}
		if ssIsWatch(r) && r.URL.Query().Get("sendInitialEvents") == "true" {
			watchLists = append(watchLists, r.String())
		} else {
			others = append(others, r.String())
		}
	}
	if len(watchLists) != 1 || len(others) != 0 {
		t.Errorf("the informer made WatchLists %v and other requests %v, want one WatchList and nothing else", watchLists, others)
	}
}
