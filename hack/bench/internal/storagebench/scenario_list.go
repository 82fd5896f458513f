package storagebench

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
	"github.com/watchkeeper/watchkeeper/internal/histogram"
)

// listWarmups are untimed lists before each timed series, so the first
// timed call does not pay for one-off allocations (pools, snapshots).
const listWarmups = 2

// List fills the resource with objects, then times repeated lists of all of
// them from the cache: at resourceVersion "0" (any cached state) and
// consistent (resourceVersion "", which must be at least as fresh as etcd).
func List(ctx context.Context, env Env, decorator string, objects, repeats int) ([]result.Result, error) {
	rec := result.NewRecorder("list", Level, decorator, map[string]int{"objects": objects, "repeats": repeats})
	s, destroy, err := openFilled(ctx, env, decorator, "list", objects)
	if err != nil {
		return nil, err
	}
	defer destroy()
	for _, series := range []struct{ name, rv string }{{"rv0", "0"}, {"consistent", ""}} {
		opts := storage.ListOptions{ResourceVersion: series.rv, Predicate: storage.Everything, Recursive: true}
		sample := make([]time.Duration, 0, repeats)
		for i := range listWarmups + repeats {
			list := &example.PodList{}
			start := time.Now()
			err := s.GetList(ctx, resourcePrefix, opts, list)
			took := time.Since(start)
			if err != nil {
				return nil, fmt.Errorf("list %s: %w", series.name, err)
			}
			if len(list.Items) != objects {
				return nil, fmt.Errorf("list %s returned %d objects, want %d", series.name, len(list.Items), objects)
			}
			if i >= listWarmups {
				sample = append(sample, took)
			}
		}
		rec.Add(series.name+"_latency_p50_ms", ms(histogram.SampleQuantile(sample, 0.50)), "ms", result.Lower)
		rec.Add(series.name+"_latency_p99_ms", ms(histogram.SampleQuantile(sample, 0.99)), "ms", result.Lower)
	}
	return rec.Results(), nil
}
