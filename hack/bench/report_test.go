package main

import (
	"strings"
	"testing"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
)

func TestNetFiguresSubtractTheBaselineOfTheSameSize(t *testing.T) {
	fig := func(dec string, watchers int, metric string, v float64) result.Result {
		return result.Result{Scenario: "idle", Level: "storage", Decorator: dec,
			Params: map[string]int{"watchers": watchers}, Metric: metric, Value: v}
	}
	got := withNetFigures([]result.Result{
		fig(decNone, 1000, "heap_stack_bytes_per_watcher", 2700),
		fig(decUpstream, 1000, "heap_stack_bytes_per_watcher", 7200),
		fig(decUpstream, 1000, "open_seconds", 0.01),
		// No baseline at this size: no net figure.
		fig(decWatchkeeper, 5000, "heap_stack_bytes_per_watcher", 3500),
	})
	var nets []result.Result
	for _, r := range got {
		if strings.HasSuffix(r.Metric, "_net") {
			nets = append(nets, r)
		}
	}
	if len(nets) != 1 || nets[0].Decorator != decUpstream || nets[0].Value != 4500 {
		t.Fatalf("net figures = %+v, want one upstream figure of 4500", nets)
	}
	if got[2].Metric != "heap_stack_bytes_per_watcher_net" {
		t.Errorf("net figure at %d (%s), want right after its gross figure", 2, got[2].Metric)
	}
}

func TestQuickPlanRunsBothDecoratorsAndTheBaseline(t *testing.T) {
	runs, skipped := plan(quickSizes, allScenarios, []string{"storage"})
	count := map[string]int{}
	for _, r := range runs {
		count[r.Scenario+"/"+r.Decorator]++
		if r.Timeout <= 0 {
			t.Errorf("%s has no timeout", r)
		}
	}
	for key, want := range map[string]int{
		"idle/none": 2, "idle/upstream": 2, "idle/watchkeeper": 2,
		"bookmarks/upstream": 2, "fanout/watchkeeper": 1, "list/upstream": 1, "watchlist/watchkeeper": 1,
	} {
		if count[key] != want {
			t.Errorf("%s runs = %d, want %d", key, count[key], want)
		}
	}
	if len(skipped) != 0 {
		t.Errorf("skipped %v at the storage level", skipped)
	}
}

func TestFormatValue(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 1234567: "1,234,567", -4500: "-4,500", 12.34: "12.3", 1.234: "1.23", 0.0012345: "0.00123"} {
		if got := formatValue(v); got != want {
			t.Errorf("formatValue(%v) = %q, want %q", v, got, want)
		}
	}
}

// A place in the order has a cost of its own (always second, watchkeeper's
// HTTP time to open 1k watches was 1.2x upstream's in five of six
// measurements of make bench, and 0.99x in the median of eight pairs
// alternating): each cache goes first in every other pair.
func TestPlanAlternatesWhichCacheGoesFirst(t *testing.T) {
	all, _ := plan(fullSizes, allScenarios, []string{"storage", "http"})
	var runs []runSpec
	for _, r := range all {
		if r.Decorator != decNone {
			runs = append(runs, r)
		}
	}
	first := map[string]int{}
	for i := 0; i+1 < len(runs); i += 2 {
		a, b := runs[i], runs[i+1]
		if a.Decorator == b.Decorator || a.Scenario != b.Scenario || a.Level != b.Level || a.Watchers != b.Watchers {
			t.Fatalf("runs %d and %d (%s, %s) are not a pair", i, i+1, a, b)
		}
		first[a.Decorator]++
	}
	if d := first[decUpstream] - first[decWatchkeeper]; d < -1 || d > 1 {
		t.Errorf("upstream goes first in %d pairs, watchkeeper in %d: want each in half", first[decUpstream], first[decWatchkeeper])
	}
}
