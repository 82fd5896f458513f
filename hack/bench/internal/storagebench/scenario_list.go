package storagebench

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
	"github.com/watchkeeper/watchkeeper/internal/histogram"
)

// listWarmups are untimed lists before each timed series, so the first
// timed call does not pay for one-off allocations (pools, snapshots).
const listWarmups = 2

// List fills the resource with objects, then times repeated lists of all of
// them from the cache: at resourceVersion "0" (any cached state) and
// consistent (resourceVersion "", which must be at least as fresh as etcd).
func List(ctx context.Context, env Env, decorator string, objects, repeats int, exactAge time.Duration) ([]result.Result, error) {
	rec := result.NewRecorder("list", Level, decorator, map[string]int{"objects": objects, "repeats": repeats, "exact_age_seconds": int(exactAge / time.Second)})
	s, destroy, err := openFilled(ctx, env, decorator, "list", objects)
	if err != nil {
		return nil, err
	}
	defer destroy()
	for _, series := range []struct{ name, rv string }{{"rv0", "0"}, {"consistent", ""}} {
		opts := storage.ListOptions{ResourceVersion: series.rv, Predicate: storage.Everything, Recursive: true}
		if err := timeLists(rec, repeats, series.name, objects, listOnce(ctx, s, opts)); err != nil {
			return nil, err
		}
	}
	// The lists snapshots serve (ListFromCacheSnapshot): kubectl's pages of
	// 500 followed to the end (timed whole), and a list at an exact RV
	// exactAge old, with a write a second since (issue 12 asks for an RV
	// 30s old).
	exactRV, _, err := currentRV(ctx, s)
	if err != nil {
		return nil, err
	}
	later := int(exactAge / time.Second)
	if err := writePods(ctx, s, later, 1, func(i int) *example.Pod {
		time.Sleep(time.Second)
		return benchPod(fmt.Sprintf("list-later-%d", i), time.Time{})
	}); err != nil {
		return nil, err
	}
	if err := waitForObjects(ctx, s, objects+later); err != nil {
		return nil, err
	}
	if err := timeLists(rec, repeats, "paginated", objects+later, func() (int, error) { return listPages(ctx, s, listPageSize) }); err != nil {
		return nil, err
	}
	exactOpts := storage.ListOptions{ResourceVersion: exactRV, ResourceVersionMatch: metav1.ResourceVersionMatchExact, Predicate: storage.Everything, Recursive: true}
	if err := timeLists(rec, repeats, "exact", objects, listOnce(ctx, s, exactOpts)); err != nil {
		return nil, err
	}
	return rec.Results(), nil
}

// timeLists times repeats calls of list (after listWarmups untimed ones),
// each of which must return want objects, and records the series' latency,
// the etcd list requests each cost, and how the collector figures in: a
// list copies every object into the result (5 MB for 10k pods of 496 bytes), so
// the lists during which a GC cycle ends are the slow ones, and a cache
// with a smaller live heap runs its cycles more often but shorter.
func timeLists(rec *result.Recorder, repeats int, name string, want int, list func() (int, error)) error {
	sample := make([]time.Duration, 0, repeats)
	var withoutGC []time.Duration
	etcdBefore := etcdListRequests()
	for i := range listWarmups + repeats {
		gcBefore := gcCycles()
		start := time.Now()
		n, err := list()
		took := time.Since(start)
		if err != nil {
			return fmt.Errorf("list %s: %w", name, err)
		}
		if n != want {
			return fmt.Errorf("list %s returned %d objects, want %d", name, n, want)
		}
		if i < listWarmups {
			continue
		}
		sample = append(sample, took)
		if gcCycles() == gcBefore {
			withoutGC = append(withoutGC, took)
		}
	}
	rec.Add(name+"_latency_p50_ms", ms(histogram.SampleQuantile(sample, 0.50)), "ms", result.Lower)
	rec.Add(name+"_latency_p99_ms", ms(histogram.SampleQuantile(sample, 0.99)), "ms", result.Lower)
	rec.Add(name+"_etcd_lists_per_list", (etcdListRequests()-etcdBefore)/float64(listWarmups+repeats), "requests", result.Lower)
	rec.Add(name+"_lists_a_gc_ended_in", float64(len(sample)-len(withoutGC)), "lists", result.Lower)
	rec.Add(name+"_latency_p50_no_gc_ms", ms(histogram.SampleQuantile(withoutGC, 0.50)), "ms", result.Lower)
	return nil
}

// listOnce is one list of the resource with opts, for timeLists.
func listOnce(ctx context.Context, s storage.Interface, opts storage.ListOptions) func() (int, error) {
	return func() (int, error) {
		list := &example.PodList{}
		err := s.GetList(ctx, resourcePrefix, opts, list)
		return len(list.Items), err
	}
}

// listPageSize is kubectl's default page.
const listPageSize = 500

// listPages lists everything in pages of limit, following the continue
// token as a client does, and returns how many objects it got.
func listPages(ctx context.Context, s storage.Interface, limit int64) (int, error) {
	got, token := 0, ""
	for {
		list := &example.PodList{}
		pred := storage.Everything
		pred.Limit, pred.Continue = limit, token
		if err := s.GetList(ctx, resourcePrefix, storage.ListOptions{Predicate: pred, Recursive: true}, list); err != nil {
			return got, err
		}
		got += len(list.Items)
		if token = list.Continue; token == "" {
			return got, nil
		}
	}
}

// etcdListRequests is this process's etcd_requests_total for list
// operations: the storage runs in the bench child.
func etcdListRequests() float64 {
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		return 0
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != "etcd_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "operation" && strings.HasPrefix(l.GetValue(), "list") {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}
