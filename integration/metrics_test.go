package integration

import (
	"context"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"
	cachermetrics "k8s.io/apiserver/pkg/storage/cacher/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/watchkeeper/watchkeeper/cacher"
)

// metricValue sums the samples of one metric whose labels include want.
func metricValue(t *testing.T, name string, want map[string]string) (float64, bool) {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total, found := 0.0, false
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if !hasLabels(m, want) {
				continue
			}
			found = true
			switch {
			case m.Counter != nil:
				total += m.Counter.GetValue()
			case m.Gauge != nil:
				total += m.Gauge.GetValue()
			case m.Histogram != nil:
				total += float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return total, found
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		ok := false
		for _, l := range m.GetLabel() {
			if l.GetName() == k && l.GetValue() == v {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// The cache reports under upstream's names where the meaning is the same,
// and under its own for what upstream has no name for.
func TestMetrics(t *testing.T) {
	gr := schema.GroupResource{Group: "metrics.test", Resource: "pods"}
	e := setup(t, withSchedule(time.Second, 500*time.Millisecond, 10*time.Second), func(c *cacher.Config) { c.GroupResource = gr })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	pred := storage.Everything
	pred.AllowWatchBookmarks = true
	w, err := e.cacher.Watch(ctx, "/pods/", storage.ListOptions{ResourceVersion: "0", Recursive: true, Predicate: pred})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	out := &example.Pod{}
	if err := e.cacher.Create(ctx, "/pods/ns/a", &example.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns"}}, out, 0); err != nil {
		t.Fatal(err)
	}
	gotEvent, gotBookmark := false, false
	for !gotEvent || !gotBookmark {
		select {
		case ev := <-w.ResultChan():
			gotEvent = gotEvent || ev.Type == watch.Added
			gotBookmark = gotBookmark || ev.Type == watch.Bookmark
		case <-ctx.Done():
			t.Fatal("no event and bookmark within 30s")
		}
	}

	labels := map[string]string{"group": gr.Group, "resource": gr.Resource}
	for _, name := range []string{
		"apiserver_watch_cache_events_received_total",
		"apiserver_watch_cache_events_dispatched_total",
		"apiserver_watch_cache_initializations_total",
		"apiserver_watch_cache_resource_version",
		"watchkeeper_watch_cache_bookmarks_sent_total",
		"watchkeeper_watch_cache_bookmark_tick_duration_seconds",
		"watchkeeper_watch_cache_bookmark_tick_watchers_due",
	} {
		if v, ok := metricValue(t, name, labels); !ok || v <= 0 {
			t.Errorf("%s%v = %v (present %v), want > 0", name, labels, v, ok)
		}
	}
	sent := map[string]string{"group": gr.Group, "resource": gr.Resource, "state": "BookmarkSent"}
	if v, _ := metricValue(t, "watchkeeper_watch_cache_watchers", sent); v != 1 {
		t.Errorf("watchers in BookmarkSent = %v, want 1", v)
	}
	w.Stop()
	var v float64
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		v, _ = metricValue(t, "watchkeeper_watch_cache_watchers", sent)
		return v == 0, nil
	}); err != nil {
		t.Fatalf("watchers gauge still %v 5s after Stop: %v", v, err)
	}
}

// Each delivery of a live event is timed by stage in upstream's
// apiserver_watch_events_dispatch_duration_seconds, all five stages per
// delivery as v0.38's cache watcher observes them: etcd3 stamps its decode
// time (the cache asks for it), so storage_to_cache and total are there
// too. An event no watcher gets and the initial events of a watch are not
// timed.
func TestDispatchDurationByStage(t *testing.T) {
	gr := schema.GroupResource{Group: "dispatch-duration.test", Resource: "pods"}
	e := setup(t, func(c *cacher.Config) { c.GroupResource = gr })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stage := func(s string) float64 {
		v, _ := metricValue(t, "apiserver_watch_events_dispatch_duration_seconds",
			map[string]string{"group": gr.Group, "resource": gr.Resource, "stage": s})
		return v
	}
	before := &example.Pod{}
	if err := e.cacher.Create(ctx, "/pods/ns/before", &example.Pod{ObjectMeta: metav1.ObjectMeta{Name: "before", Namespace: "ns"}}, before, 0); err != nil {
		t.Fatal(err)
	}
	// A list at its RV waits for the cache to have it, so the watch below
	// gets it as an initial event.
	if err := e.cacher.GetList(ctx, "/pods/", storage.ListOptions{ResourceVersion: before.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, Recursive: true, Predicate: storage.Everything}, &example.PodList{}); err != nil {
		t.Fatal(err)
	}
	w, err := e.cacher.Watch(ctx, "/pods/", storage.ListOptions{ResourceVersion: "0", Recursive: true, Predicate: storage.Everything})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if ev := <-w.ResultChan(); ev.Type != watch.Added {
		t.Fatalf("initial event %v, want ADDED", ev.Type)
	}
	if got := stage("total"); got != 0 {
		t.Fatalf("an initial event was timed: total %v, want 0", got)
	}
	for _, name := range []string{"a", "b"} {
		if err := e.cacher.Create(ctx, "/pods/ns/"+name, &example.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}, &example.Pod{}, 0); err != nil {
			t.Fatal(err)
		}
		select {
		case ev := <-w.ResultChan():
			if ev.Type != watch.Added {
				t.Fatalf("got %v, want ADDED", ev.Type)
			}
		case <-ctx.Done():
			t.Fatal("no event within 30s")
		}
	}
	stages := []string{"storage_to_cache", "cacher_queue_latency", "watcher_queue_latency", "watcher_to_client_handler", "total"}
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return stage("total") == 2, nil
	}); err != nil {
		t.Errorf("total observed %v times, want once per delivered event (2)", stage("total"))
	}
	for _, s := range stages {
		if got := stage(s); got != 2 {
			t.Errorf("%s observed %v times, want once per delivery (2)", s, got)
		}
	}
	// The series are upstream's: its help and buckets, beside its vec.
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "apiserver_watch_events_dispatch_duration_seconds" {
			continue
		}
		if f.GetHelp() != cachermetrics.DispatchStageDuration.Help || f.GetType() != dto.MetricType_HISTOGRAM {
			t.Errorf("help %q, type %v; want upstream's %q, a histogram", f.GetHelp(), f.GetType(), cachermetrics.DispatchStageDuration.Help)
		}
		for _, m := range f.GetMetric() {
			if hasLabels(m, map[string]string{"group": gr.Group}) {
				var bounds []float64
				for _, b := range m.GetHistogram().GetBucket() {
					bounds = append(bounds, b.GetUpperBound())
				}
				if !slices.Equal(bounds, cachermetrics.DispatchStageDuration.Buckets) {
					t.Errorf("buckets %v, want upstream's %v", bounds, cachermetrics.DispatchStageDuration.Buckets)
				}
			}
		}
	}
}
