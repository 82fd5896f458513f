package main

import (
	"fmt"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
)

// netOfBaseline are the idle figures that have a `none` baseline. What a
// watch costs at minimum (a consumer goroutine and a channel) is paid with
// or without a cache, so the cache's own cost per idle watcher is the figure
// minus the baseline at the same size.
var netOfBaseline = []string{"heap_stack_bytes_per_watcher", "goroutines_per_watcher"}

// withNetFigures returns results with a <metric>_net figure inserted after
// each idle figure that has a baseline measured at the same size. Both
// operands are measurements of this run; none is made up.
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
		if r.Decorator == decNone || r.Scenario != "idle" {
			continue
		}
		for _, m := range netOfBaseline {
			if r.Metric != m {
				continue
			}
			if b, ok := baseline[baselineKey(r)]; ok {
				net := r
				net.Metric = m + "_net"
				net.Value = r.Value - b
				out = append(out, net)
			}
		}
	}
	return out
}

func baselineKey(r result.Result) string {
	return fmt.Sprintf("%s|%s|%d|%s", r.Scenario, r.Level, r.Params["watchers"], r.Metric)
}
