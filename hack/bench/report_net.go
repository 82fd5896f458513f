package main

import (
	"slices"
	"strings"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
)

// netOfBaseline are the figures that have a `none` baseline, by scenario.
// What a watch costs at minimum (a consumer goroutine and a channel) is paid
// with or without a cache, so the cache's own cost per idle watcher is the
// figure minus the baseline at the same size; and what the process holds
// without a cache (its etcd clients, its types) is no cached object's, so
// the memory per cached object is the heap per object minus the baseline's
// at the same size.
var netOfBaseline = map[string][]string{
	"idle":   {"heap_stack_bytes_per_watcher", "goroutines_per_watcher"},
	"memory": {"heap_bytes_per_object_filled", "heap_bytes_per_object_updated"},
}

// withNetFigures returns results with a <metric>_net figure inserted after
// each figure that has a baseline measured at the same size. Both operands
// are measurements of this run; none is made up.
func withNetFigures(results []result.Result) []result.Result {
	baseline := map[string]float64{}
	for _, r := range results {
		if r.Decorator == decNone {
			baseline[baselineKey(r)] = r.Value
		}
	}
	out := make([]result.Result, 0, len(results)+len(results)/2)
	for _, r := range results {
		out = append(out, r)
		if r.Decorator == decNone || !slices.Contains(netOfBaseline[r.Scenario], r.Metric) {
			continue
		}
		if b, ok := baseline[baselineKey(r)]; ok {
			net := r
			net.Metric = r.Metric + netSuffix
			net.Value = r.Value - b
			out = append(out, net)
		}
	}
	return out
}

// netSuffix names a figure net of the baseline.
const netSuffix = "_net"

// baselineKey is a figure's scenario, level, sizes and metric: the baseline
// of the same size has the same key.
func baselineKey(r result.Result) string {
	return strings.Join([]string{r.Scenario, r.Level, formatParams(r.Params), r.Metric}, "|")
}
