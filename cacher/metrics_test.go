package cacher

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"
	upstream "k8s.io/apiserver/pkg/storage/cacher/metrics"
	compbasemetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"
)

// The upstream series mean what upstream's mean, so kube-apiserver
// dashboards read true: events_dispatched_total once per event (it counted
// per watcher), init_events_total per initial event, cache_list_* per list
// served from the cache. (consistent_read_total needs etcd's consistent
// reads: the integration test over /metrics checks it.)
func TestUpstreamMetricsMeanWhatUpstreamsMean(t *testing.T) {
	gr := schema.GroupResource{Group: "metrics.test", Resource: "pods"}
	fs := newFakeStorage(100, newTestPod("a", 100, nil, ""), newTestPod("b", 100, nil, ""))
	c := newTestCacher(t, fs, func(cfg *Config) { cfg.GroupResource = gr })
	c.waitReady(t)
	sw, _ := fs.waitWatch(t, 1)
	g, r := gr.Group, gr.Resource
	value := func(m compbasemetrics.CounterMetric) float64 {
		t.Helper()
		v, err := testutil.GetCounterMetricValue(m)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	dispatched := upstream.EventsCounter.WithLabelValues(g, r)
	initEvents := upstream.InitCounter.WithLabelValues(g, r)
	i0 := value(initEvents)

	var ws []watch.Interface
	for range 3 {
		ws = append(ws, c.startWatch(t, context.Background(), "0", everything(false))) // 2 initial ADDED each
	}
	if got := value(initEvents) - i0; got != 6 {
		t.Errorf("init_events_total +%v for 3 watches of 2 objects, want +6", got)
	}
	// One event delivered to all, then the count, so the list's progress
	// (dispatched too, as upstream counts) is behind us; then one more.
	sw.send(t, watch.Modified, newTestPod("a", 101, map[string]string{"v": "1"}, ""))
	for _, w := range ws {
		for ev := nextEvent(t, w); ev.Type == watch.Added; ev = nextEvent(t, w) {
		}
	}
	d1 := value(dispatched)
	sw.send(t, watch.Modified, newTestPod("a", 102, map[string]string{"v": "2"}, ""))
	for _, w := range ws {
		nextEvent(t, w)
	}
	if got := value(dispatched) - d1; got != 1 {
		t.Errorf("events_dispatched_total +%v for one event to 3 watchers, want +1", got)
	}

	// A list served from the cache, with a selector that keeps one of the
	// two objects: upstream's fetched counts what the list looked at,
	// returned what it answered.
	series := map[string]string{"group": g, "resource": r}
	lists0 := gathered(t, "apiserver_cache_list_total", series)
	fetched0 := gathered(t, "apiserver_cache_list_fetched_objects_total", series)
	returned0 := gathered(t, "apiserver_cache_list_returned_objects_total", series)
	pred := everything(false)
	pred.Label = labels.SelectorFromSet(mustParseSet("v=2"))
	list := &example.PodList{}
	if err := c.GetList(context.Background(), "/pods/", storage.ListOptions{ResourceVersion: "0", Recursive: true, Predicate: pred}, list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("list of v=2 returned %d objects, want 1", len(list.Items))
	}
	if got := gathered(t, "apiserver_cache_list_total", series) - lists0; got != 1 {
		t.Errorf("apiserver_cache_list_total +%v for a list served from the cache, want +1", got)
	}
	if got := gathered(t, "apiserver_cache_list_fetched_objects_total", series) - fetched0; got != 2 {
		t.Errorf("apiserver_cache_list_fetched_objects_total +%v for a list that looked at 2 objects, want +2", got)
	}
	if got := gathered(t, "apiserver_cache_list_returned_objects_total", series) - returned0; got != 1 {
		t.Errorf("apiserver_cache_list_returned_objects_total +%v for a list that returned 1 of 2, want +1", got)
	}
}

// gathered sums the series of name whose labels include want, from the
// registry the cache registers in.
func gathered(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue metric
				}
			}
			total += m.GetCounter().GetValue()
		}
	}
	return total
}

// Each initialization (the list that makes the cache's state) is timed in
// upstream's apiserver_watch_cache_initialization_duration_seconds, as
// upstream's cacher does: one observation per apiserver_watch_cache_
// initializations_total.
func TestInitializationDurationIsObserved(t *testing.T) {
	gr := schema.GroupResource{Group: "metrics.test", Resource: "initpods"}
	c := newTestCacher(t, newFakeStorage(100, newTestPod("a", 100, nil, "")), func(cfg *Config) { cfg.GroupResource = gr })
	c.waitReady(t)
	inits, err := testutil.GetCounterMetricValue(upstream.WatchCacheInitializations.WithLabelValues(gr.Group, gr.Resource))
	if err != nil {
		t.Fatal(err)
	}
	timed, err := testutil.GetHistogramMetricCount(upstream.WatchCacheInitializationDuration.WithLabelValues(gr.Group, gr.Resource))
	if err != nil {
		t.Fatal(err)
	}
	if inits != 1 || timed != 1 {
		t.Errorf("after one initialization: initializations_total %v, initialization_duration_seconds count %d; want 1 and 1", inits, timed)
	}
}
