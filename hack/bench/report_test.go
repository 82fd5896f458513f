package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
	"github.com/watchkeeper/watchkeeper/hack/bench/internal/storagebench"
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
		"sharded/upstream": 1, "sharded/watchkeeper": 1, "sharded/none": 0, "prevkv/upstream": 2, "prevkv/watchkeeper": 2,
		"slowtax/upstream": 1, "slowtax/watchkeeper": 1, "slowtax/none": 0,
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
		// The baseline and the variants (restart's backfill-off, budget's
		// budgeted, memory's unshared, compact) are extra runs beside the pair.
		if !slices.Contains([]string{decNone, storagebench.WatchkeeperNoBackfill, storagebench.WatchkeeperBudget, storagebench.WatchkeeperUnshared, storagebench.WatchkeeperCompact}, r.Decorator) {
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

// The sizes that run in pairs run each pair with both caches back to back,
// which goes first alternating, and every pair is told apart.
func TestPlanRunsPairs(t *testing.T) {
	all, _ := plan(fullSizes, []string{"exactkey", "fanout"}, []string{"storage", "http"})
	type size struct {
		scenario, level string
		watchers        int
	}
	seen := map[size][]string{}
	baselines := map[size][]int{}
	compact := map[size]int{}
	for _, r := range all {
		k := size{r.Scenario, r.Level, r.Watchers}
		if r.Decorator == decNone {
			baselines[k] = append(baselines[k], r.Pair+1)
			continue
		}
		if r.Decorator == storagebench.WatchkeeperCompact {
			compact[k]++
			continue
		}
		seen[k] = append(seen[k], fmt.Sprintf("%d:%s", r.Pair+1, r.Decorator))
	}
	// exactkey's floor, no cache, runs once in each pair (before it).
	for k := range seen {
		want := []int(nil)
		if k.scenario == "exactkey" && k.level == "storage" {
			for p := range fullSizes.exactKeyPairs {
				want = append(want, p+1)
			}
		}
		if fmt.Sprint(baselines[k]) != fmt.Sprint(want) {
			t.Errorf("%v: baseline runs in pairs %v, want %v", k, baselines[k], want)
		}
	}
	for k := range seen {
		// Compact form beside the pair: fan-out at the storage level only.
		want := 0
		if k.scenario == "fanout" && k.level == "storage" {
			want = 1
		}
		if compact[k] != want {
			t.Errorf("%v: %d watchkeeper-compact runs, want %d", k, compact[k], want)
		}
	}
	for k, got := range seen {
		want := 1
		switch {
		case k.scenario == "exactkey":
			want = fullSizes.exactKeyPairs
		case k.scenario == "fanout" && k.level == "http":
			want = fullSizes.httpFanOutPairs
		}
		if len(got) != 2*want {
			t.Errorf("%v: runs %v, want %d pairs", k, got, want)
			continue
		}
		for p := 0; p < want; p++ {
			a, b := got[2*p], got[2*p+1]
			if a[:2] != fmt.Sprintf("%d:", p+1) || b[:2] != a[:2] || a == b {
				t.Errorf("%v: runs %v, pair %d is not both caches back to back", k, got, p+1)
			}
			if p > 0 && a[2:] == got[2*p-2][2:] {
				t.Errorf("%v: runs %v, the same cache goes first in pairs %d and %d", k, got, p, p+1)
			}
		}
	}
	names := map[string]bool{}
	for _, r := range all {
		if names[r.String()] {
			t.Errorf("two runs are named %s: their logs would overwrite each other", r)
		}
		names[r.String()] = true
	}
}

// Each figure of a paired size is the median of its pairs' values, with
// the count; figures of unpaired runs are left as they were, in order.
func TestMedianOfPairs(t *testing.T) {
	var raw []result.Result
	add := func(r runSpec, metric string, v float64) {
		got := []result.Result{{Scenario: r.Scenario, Level: r.Level, Decorator: r.Decorator,
			Params: map[string]int{"watchers": r.Watchers}, Metric: metric, Value: v}}
		tagPair(got, r)
		raw = append(raw, got...)
	}
	idle := runSpec{Scenario: "idle", Level: "storage", Decorator: decUpstream, Watchers: 10, Pairs: 1}
	add(idle, "m", 7)
	for p, vs := range [][2]float64{{5, 1}, {1, 2}, {4, 9}} {
		for i, d := range []string{decUpstream, decWatchkeeper} {
			add(runSpec{Scenario: "exactkey", Level: "storage", Decorator: d, Watchers: 10, Pairs: 3, Pair: p}, "cpu", vs[i])
		}
	}
	got := medianOfPairs(raw)
	var lines []string
	for _, r := range got {
		lines = append(lines, fmt.Sprintf("%s %s %v %s=%v", r.Scenario, r.Decorator, r.Params, r.Metric, r.Value))
	}
	want := []string{
		"idle upstream map[watchers:10] m=7",
		"exactkey upstream map[pairs:3 watchers:10] cpu=4",
		"exactkey watchkeeper map[pairs:3 watchers:10] cpu=2",
	}
	if fmt.Sprint(lines) != fmt.Sprint(want) {
		t.Errorf("merged:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if _, ok := raw[1].Params[paramPair]; !ok || raw[0].Params[paramPair] != 0 {
		t.Errorf("raw results lost their pair tags or an unpaired run got one: %v, %v", raw[1].Params, raw[0].Params)
	}
}

// The memory scenario's heap figures get a net figure too, matched to the
// none run of the same objects and object size.
func TestNetFiguresOfMemory(t *testing.T) {
	fig := func(dec string, objects, bytes int, metric string, v float64) result.Result {
		return result.Result{Scenario: "memory", Level: "storage", Decorator: dec,
			Params: map[string]int{"objects": objects, "object_bytes": bytes}, Metric: metric, Value: v}
	}
	got := withNetFigures([]result.Result{
		fig(decNone, 10_000, 190, "heap_bytes_per_object_updated", 400),
		fig(decNone, 10_000, 2900, "heap_bytes_per_object_updated", 450),
		fig(decWatchkeeper, 10_000, 2900, "heap_bytes_per_object_updated", 25_450),
		fig(decWatchkeeper, 10_000, 2900, "start_to_ready_seconds", 1.5),
		// No none run of this size.
		fig(decUpstream, 100_000, 2900, "heap_bytes_per_object_updated", 30_000),
	})
	var nets []result.Result
	for _, r := range got {
		if strings.HasSuffix(r.Metric, "_net") {
			nets = append(nets, r)
		}
	}
	if len(nets) != 1 || nets[0].Decorator != decWatchkeeper || nets[0].Value != 25_000 || nets[0].Metric != "heap_bytes_per_object_updated_net" {
		t.Fatalf("net figures = %+v, want watchkeeper's heap_bytes_per_object_updated_net of 25000", nets)
	}
}

// The memory scenario runs each kind at each size with none before the
// pair and watchkeeper-unshared after it, its child is told the kind, and
// only the realistic pods at the largest size write heap profiles, one per
// decorator.
func TestPlanMemory(t *testing.T) {
	runs, skipped := plan(fullSizes, []string{"memory"}, []string{"storage", "http"})
	if len(skipped) != 0 {
		t.Errorf("skipped %v", skipped)
	}
	got := map[string]int{}
	var profiled []string
	for _, r := range runs {
		got[fmt.Sprintf("%s/%d/%s", r.Kind, r.Objects, r.Decorator)]++
		if args := strings.Join(childFlags{spec: r}.args(), " "); !strings.Contains(args, "--kind "+r.Kind) {
			t.Errorf("child args %q lack the kind", args)
		}
		if takesHeapProfile(r, fullSizes) {
			profiled = append(profiled, r.String())
		}
	}
	for _, kind := range []string{"small", "realistic"} {
		for _, n := range []int{10_000, 100_000} {
			for _, dec := range []string{decNone, decUpstream, decWatchkeeper, storagebench.WatchkeeperUnshared, storagebench.WatchkeeperCompact} {
				if k := fmt.Sprintf("%s/%d/%s", kind, n, dec); got[k] != 1 {
					t.Errorf("%s runs = %d, want 1", k, got[k])
				}
			}
		}
	}
	for _, dec := range []string{decNone, decUpstream, decWatchkeeper, storagebench.WatchkeeperUnshared, storagebench.WatchkeeperCompact} {
		if k := "custom/10000/" + dec; got[k] != 1 {
			t.Errorf("%s runs = %d, want 1", k, got[k])
		}
	}
	if len(runs) != 25 {
		t.Errorf("%d runs, want 25 (no 100k custom resources)", len(runs))
	}
	want := []string{"memory/storage/none-o100000-realistic", "memory/storage/upstream-o100000-realistic",
		"memory/storage/watchkeeper-compact-o100000-realistic", "memory/storage/watchkeeper-o100000-realistic",
		"memory/storage/watchkeeper-unshared-o100000-realistic"}
	slices.Sort(profiled)
	if !slices.Equal(profiled, want) {
		t.Errorf("heap profiles from %v, want %v", profiled, want)
	}
}

// sharded runs each size with both caches; prevkv runs both caches with the
// gate WatchFromStorageWithoutPrevKV on and with it off, each gate value a
// child of its own (the gate is process-wide) whose name and flags say it.
func TestPlanShardedAndPrevKV(t *testing.T) {
	for _, sz := range []sizes{quickSizes, fullSizes} {
		runs, skipped := plan(sz, []string{"sharded", "prevkv"}, []string{"storage", "http"})
		if len(skipped) != 0 {
			t.Errorf("skipped %v", skipped)
		}
		got := map[string]int{}
		for _, r := range runs {
			if r.Level != "storage" {
				t.Errorf("%s runs at level %s", r, r.Level)
			}
			key := r.Scenario + "/" + r.Decorator
			switch r.Scenario {
			case "sharded":
				if r.Watchers <= 1 || r.Events <= r.Watchers || r.FeatureGates != "" {
					t.Errorf("%s: %d shards, %d events, gates %q", r, r.Watchers, r.Events, r.FeatureGates)
				}
			case "prevkv":
				if r.Objects != sz.prevKVObjects {
					t.Errorf("%s: %d objects, want %d", r, r.Objects, sz.prevKVObjects)
				}
				key += "/" + r.FeatureGates
				args := strings.Join(childFlags{spec: r}.args(), " ")
				if !strings.Contains(args, "--feature-gates "+r.FeatureGates) {
					t.Errorf("%s: child args %q do not set its gates", r, args)
				}
				if !strings.Contains(r.String(), strings.ReplaceAll(r.FeatureGates, "=", "-")) {
					t.Errorf("run %s: the name does not say its gates %s", r, r.FeatureGates)
				}
			}
			got[key]++
		}
		want := map[string]int{
			"sharded/upstream": len(sz.shardedWatchers), "sharded/watchkeeper": len(sz.shardedWatchers),
			"prevkv/upstream/WatchFromStorageWithoutPrevKV=true": 1, "prevkv/upstream/WatchFromStorageWithoutPrevKV=false": 1,
			"prevkv/watchkeeper/WatchFromStorageWithoutPrevKV=true": 1, "prevkv/watchkeeper/WatchFromStorageWithoutPrevKV=false": 1,
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("runs %v, want %v", got, want)
		}
		names := map[string]bool{}
		for _, r := range runs {
			if names[r.String()] {
				t.Errorf("two runs are named %s", r)
			}
			names[r.String()] = true
		}
	}
	if _, err := pickList("sharded,prevkv", allScenarios, "scenario"); err != nil {
		t.Errorf("-scenarios sharded,prevkv: %v", err)
	}
}

// A variant's figures (budget's watchkeeper-budget) reach results.md in a
// table of their own, beside upstream's of the same run.
func TestReportShowsVariants(t *testing.T) {
	p := map[string]int{"objects": 2_000}
	var rs []result.Result
	for dec, v := range map[string]float64{decUpstream: 16_040, decWatchkeeper: 30_167, storagebench.WatchkeeperBudget: 2_414} {
		rs = append(rs, result.Result{Scenario: "budget", Level: "storage", Decorator: dec, Params: p,
			Metric: "heap_bytes_per_object", Unit: "B", Better: result.Lower, Value: v})
	}
	wantLines(t, "results.md", markdownReport(reportHeader{}, rs, nil),
		"| budget | storage | objects=2000 | heap_bytes_per_object [B] | 16,040 | 30,167 | 1.88 | lower |",
		"| budget | storage | objects=2000 | heap_bytes_per_object [B] | watchkeeper-budget | 2,414 | 16,040 | 0.15 |")
}
