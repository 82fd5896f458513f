package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/watchkeeper/watchkeeper/internal/childserver"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/v1alpha1"
)

// The upstream series a kube-apiserver dashboard reads mean what they mean
// there, scraped from the sample apiserver's /metrics (issue 12):
// events_dispatched_total once per event whatever the watchers,
// consistent_read_total for consistent lists served from the cache,
// read_wait_seconds for a read that waited, cache_list_total per list from
// the cache.
func TestSampleServerUpstreamMetricsOverHTTP(t *testing.T) {
	const watchers, events = 5, 4
	s := startSampleServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), ssTestDeadline)
	defer cancel()
	rc, err := rest.UnversionedRESTClientFor(withNegotiation(s.Admin))
	if err != nil {
		t.Fatal(err)
	}
	const labels = `{group="demo.watchkeeper.io",resource="widgets"}`
	series := []string{
		"apiserver_watch_cache_events_dispatched_total" + labels,
		`apiserver_watch_cache_consistent_read_total{fallback="false",group="demo.watchkeeper.io",resource="widgets",success="true"}`,
		"apiserver_watch_cache_read_wait_seconds_count" + labels,
		`apiserver_cache_list_total{group="demo.watchkeeper.io",index="",resource="widgets"}`,
	}
	scrape := func() []float64 {
		t.Helper()
		body, err := rc.Get().AbsPath("/metrics").DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		v, err := childserver.ParseMetrics(body, series...)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	widgets := s.Client.DemoV1alpha1().Widgets("metrics")
	// One write and one of each read first, so every series exists.
	if _, err := widgets.Create(ctx, ssWidget("metrics", "first"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := widgets.List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := widgets.List(ctx, metav1.ListOptions{ResourceVersion: "0"}); err != nil {
		t.Fatal(err)
	}
	list, err := widgets.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := scrape()

	var ws []watch.Interface
	for range watchers {
		w, err := widgets.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		ws = append(ws, w)
	}
	for i := range events {
		if _, err := widgets.Create(ctx, ssWidget("metrics", fmt.Sprintf("w-%d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range ws {
		for range events {
			bhNext(t, w, 10*time.Second)
		}
	}
	// A write to gadgets moves etcd on: a consistent list of widgets must
	// wait for the widgets cache to hear of it.
	if _, err := s.Client.DemoV1alpha1().Gadgets().Create(ctx, &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: "metrics"}, Spec: v1alpha1.GadgetSpec{Owner: "t"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := widgets.List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := widgets.List(ctx, metav1.ListOptions{ResourceVersion: "0"}); err != nil {
		t.Fatal(err)
	}
	after := scrape()
	d := make([]float64, len(series))
	for i := range series {
		d[i] = after[i] - before[i]
	}
	t.Logf("%d events to %d watchers: dispatched +%v; consistent list: consistent_read{success} +%v, read_wait count +%v; consistent and RV 0 lists: cache_list +%v",
		events, watchers, d[0], d[1], d[2], d[3])
	// Progress notifications are dispatched events too, as upstream counts
	// them: at least the writes, far from once per watcher.
	if d[0] < events || d[0] >= events*watchers {
		t.Errorf("events_dispatched_total +%v for %d events to %d watchers, want about %d (once per event)", d[0], events, watchers, events)
	}
	if d[1] != 1 {
		t.Errorf("consistent_read_total{success=true,fallback=false} +%v for one consistent list from the cache, want +1", d[1])
	}
	if d[2] < 1 {
		t.Errorf("read_wait_seconds_count +%v for a list that waited for the cache, want at least +1", d[2])
	}
	if d[3] != 2 {
		t.Errorf("cache_list_total +%v for two lists from the cache (consistent, RV 0), want +2", d[3])
	}
}
