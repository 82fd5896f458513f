package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
)

// targetRow is one target a scenario is held to, with the figures it is
// judged on (upstream's, and judged's: watchkeeper's, or for the floor
// table no cache's) and the verdict.
type targetRow struct {
	scenario, target string
	upstream, judged string
	ratio, verdict   string
}

// Targets of issue 13's scenarios.
const (
	exactKeyMaxRatio    = 0.5 // watchkeeper's CPU per write at the largest N over upstream's
	exactKeyMaxFlatness = 1.2 // watchkeeper's CPU per write at the largest N over the smallest
	stormMaxLagMs       = 100.0
	// The HTTP fan-out (issue 13.4), on the median of its pairs.
	httpFanOutMinEventsRatio = 1.2
	httpFanOutMaxP99Ratio    = 1.0
	// The memory scenario (issue 29.2): watchkeeper's heap per object
	// after the updates, net of no cache, and its time from start to
	// ready, over upstream's.
	memoryMaxHeapRatio  = 0.5
	memoryMaxReadyRatio = 1.0
	// exactkey's own cost (issue 29.1): watchkeeper's CPU per write over
	// no cache's, at every size.
	exactKeyMaxOwnCost = 1.15
)

// figures indexes one level's results by scenario, decorator and metric,
// each with its values by params.
type figures map[string][]result.Result

func indexFigures(results []result.Result, level string) figures {
	f := figures{}
	for _, r := range results {
		if r.Level != level {
			continue
		}
		k := r.Scenario + "|" + r.Decorator + "|" + r.Metric
		f[k] = append(f[k], r)
	}
	return f
}

// at is the figure of scenario, decorator and metric at watchers (0: any
// size; the last one).
func (f figures) at(scenario, decorator, metric string, watchers int) (float64, bool) {
	r, ok := f.result(scenario, decorator, metric, watchers)
	return r.Value, ok
}

// result is at's result, params and all.
func (f figures) result(scenario, decorator, metric string, watchers int) (result.Result, bool) {
	rs := f[scenario+"|"+decorator+"|"+metric]
	for i := len(rs) - 1; i >= 0; i-- {
		if watchers == 0 || rs[i].Params["watchers"] == watchers {
			return rs[i], true
		}
	}
	return result.Result{}, false
}

// targetRows judges the targets whose figures are in results.
func targetRows(results []result.Result) []targetRow {
	f := indexFigures(results, "storage")
	var rows []targetRow
	rows = append(rows, exactKeyTargets(f, decWatchkeeper)...)
	rows = append(rows, ownCostTargets(f)...)
	rows = append(rows, stormTargets(f)...)
	rows = append(rows, httpFanOutTargets(indexFigures(results, "http"))...)
	rows = append(rows, memoryTargets(f)...)
	return rows
}

// withParams is the figure of scenario, decorator and metric whose sizes
// are exactly params.
func (f figures) withParams(scenario, decorator, metric string, params map[string]int) (float64, bool) {
	want := formatParams(params)
	for _, r := range f[scenario+"|"+decorator+"|"+metric] {
		if formatParams(r.Params) == want {
			return r.Value, true
		}
	}
	return 0, false
}

// memoryTargets judges the memory scenario at every size both caches ran:
// watchkeeper's heap per object after the updates, net of no cache (gross
// when no none run has the size), at most memoryMaxHeapRatio of upstream's;
// its start to ready at most memoryMaxReadyRatio of upstream's.
func memoryTargets(f figures) []targetRow {
	const heap, ready = "heap_bytes_per_object_updated", "start_to_ready_seconds"
	var rows []targetRow
	for _, r := range f["memory|"+decWatchkeeper+"|"+heap] {
		of := fmt.Sprintf("%s %s", count(r.Params["objects"]), objectsOf(r.Params["object_bytes"]))
		metric, net := heap+netSuffix, "net of no cache"
		if _, ok := f.withParams("memory", decWatchkeeper, metric, r.Params); !ok {
			metric, net = heap, "gross: no none run"
		}
		for _, t := range []struct {
			metric, what, unit string
			max                float64
		}{
			{metric, fmt.Sprintf("heap per object after every object's update (%s), %s", net, of), "B", memoryMaxHeapRatio},
			{ready, "time from the cache's start to ready over " + of, "s", memoryMaxReadyRatio},
		} {
			up, okU := f.withParams("memory", decUpstream, t.metric, r.Params)
			wk, okW := f.withParams("memory", decWatchkeeper, t.metric, r.Params)
			if !okU || !okW {
				continue
			}
			rows = append(rows, targetRow{scenario: "memory",
				target:   fmt.Sprintf("%s <= %.1fx upstream's", t.what, t.max),
				upstream: formatValue(up) + " " + t.unit, judged: formatValue(wk) + " " + t.unit,
				ratio: ratioOf(wk, up), verdict: verdict(up > 0 && wk/up <= t.max)})
		}
	}
	return rows
}

// objectsOf names objects of the size the memory scenario reports (its
// object_bytes param: the mean encoded size).
func objectsOf(bytes int) string {
	if bytes >= 1024 {
		return fmt.Sprintf("pods of %.1f KB", float64(bytes)/1024)
	}
	return fmt.Sprintf("pods of %d B", bytes)
}

// httpFanOutTargets judges the HTTP fan-out's events/s and p99 at each size
// both caches ran, on its figures (the median of its pairs, when paired).
func httpFanOutTargets(f figures) []targetRow {
	var rows []targetRow
	for _, n := range f.watcherSizes("fanout", decWatchkeeper, "events_delivered_per_second") {
		of := "one run"
		if pairs := f.pairsAt("fanout", decWatchkeeper, "events_delivered_per_second", n); pairs > 1 {
			of = fmt.Sprintf("the median of %d pairs", pairs)
		}
		for _, t := range []struct {
			metric, what, unit string
			ok                 func(ratio float64) bool
		}{
			{"events_delivered_per_second", fmt.Sprintf("events/s >= %.1fx upstream's", httpFanOutMinEventsRatio), "events/s",
				func(r float64) bool { return r >= httpFanOutMinEventsRatio }},
			{"latency_p99", fmt.Sprintf("latency p99 <= %.1fx upstream's", httpFanOutMaxP99Ratio), "ms",
				func(r float64) bool { return r <= httpFanOutMaxP99Ratio }},
		} {
			up, okU := f.at("fanout", decUpstream, t.metric, n)
			wk, okW := f.at("fanout", decWatchkeeper, t.metric, n)
			if !okU || !okW {
				continue
			}
			rows = append(rows, targetRow{scenario: "fanout (http)",
				target:   fmt.Sprintf("%s watches, %s (%s)", count(n), t.what, of),
				upstream: formatValue(up) + " " + t.unit, judged: formatValue(wk) + " " + t.unit,
				ratio: ratioOf(wk, up), verdict: verdict(up > 0 && t.ok(wk/up))})
		}
	}
	return rows
}

// watcherSizes are the watcher counts of scenario's runs with decorator
// that reported metric, smallest first.
func (f figures) watcherSizes(scenario, decorator, metric string) []int {
	var sizes []int
	for _, r := range f[scenario+"|"+decorator+"|"+metric] {
		sizes = append(sizes, r.Params["watchers"])
	}
	slices.Sort(sizes)
	return slices.Compact(sizes)
}

// pairsAt is how many pairs the figure at n watchers is the median of (0:
// one run, unpaired).
func (f figures) pairsAt(scenario, decorator, metric string, n int) int {
	r, _ := f.result(scenario, decorator, metric, n)
	return r.Params[paramPairs]
}

// ownCostTargets judges issue 29.1's own cost at every exactkey size where
// watchkeeper and none both ran: watchkeeper's CPU per write over none's
// (one etcd3 watch and a map from key to channels, the floor any cache in
// front of etcd stands on) at most exactKeyMaxOwnCost; the upstream column
// holds upstream's over none's. The figures are those the other exactkey
// targets read: each the median of its pairs, when paired.
func ownCostTargets(f figures) []targetRow {
	const metric = "cpu_ms_per_write"
	var rows []targetRow
	for _, n := range f.watcherSizes("exactkey", decWatchkeeper, metric) {
		floor, ok := f.at("exactkey", decNone, metric, n)
		if !ok {
			continue
		}
		wk, _ := f.at("exactkey", decWatchkeeper, metric, n)
		up, okU := f.at("exactkey", decUpstream, metric, n)
		of := ""
		if pairs := f.pairsAt("exactkey", decWatchkeeper, metric, n); pairs > 1 {
			of = fmt.Sprintf(" (the median of %d pairs)", pairs)
		}
		upstream := "not measured"
		if okU {
			upstream = overFloor(up, floor)
		}
		rows = append(rows, targetRow{scenario: "exactkey",
			target: fmt.Sprintf("own cost per write over no cache at %s watchers: CPU per write / none's <= %.2fx%s",
				count(n), exactKeyMaxOwnCost, of),
			upstream: upstream, judged: overFloor(wk, floor),
			ratio: ratioOrDash(wk, true, up, okU), verdict: verdict(floor > 0 && wk/floor <= exactKeyMaxOwnCost)})
	}
	return rows
}

// overFloor shows a CPU per write over no cache's: "0.108 / 0.081 ms (1.33x)".
func overFloor(v, floor float64) string {
	return fmt.Sprintf("%s / %s ms (%sx)", formatValue(v), formatValue(floor), ratioOf(v, floor))
}

// exactkey's metrics the targets read besides its CPU per write.
const (
	unwatchedMetric = "cpu_ms_per_write_unwatched"
	deliveryMetric  = "cpu_us_per_delivery"
)

// exactKeyTargets judges issue 13.1's two targets as written, and the same
// two on the two parts of the CPU per write that exactkey's unwatched rounds
// tell apart: the writes no watcher selects must cost no more at the
// largest N than at the smallest (the index's job), and what grows with N,
// the deliveries, must each cost at most exactKeyMaxRatio of upstream's.
// dec is whose figures are judged: watchkeeper's, or for the floor table the
// none run's (no cache at all).
func exactKeyTargets(f figures, dec string) []targetRow {
	const metric = "cpu_ms_per_write"
	var sizes []int
	for _, r := range f["exactkey|"+dec+"|"+metric] {
		if _, ok := f.at("exactkey", decUpstream, metric, r.Params["watchers"]); ok {
			sizes = append(sizes, r.Params["watchers"])
		}
	}
	if len(sizes) == 0 {
		return nil
	}
	slices.Sort(sizes)
	lo, hi := sizes[0], sizes[len(sizes)-1]
	var rows []targetRow
	// Both have the CPU per write at every size in sizes.
	row, _ := exactKeyRatio(f, dec, metric, "ms", fmt.Sprintf("CPU per write at %s watchers", count(hi)), hi)
	rows = append(rows, row)
	if lo != hi {
		rows = append(rows, exactKeyFlatness(f, dec, metric, "CPU per write", lo, hi))
		if _, ok := f.at("exactkey", dec, unwatchedMetric, hi); ok {
			rows = append(rows, exactKeyFlatness(f, dec, unwatchedMetric, "CPU per write no watcher selects", lo, hi))
		}
	}
	if row, ok := exactKeyRatio(f, dec, deliveryMetric, "us",
		fmt.Sprintf("CPU per delivery at %s watchers (the CPU per write above the unwatched writes', per event a watcher gets)", count(hi)), hi); ok {
		rows = append(rows, row)
	}
	for _, n := range sizes {
		var ups, got []string
		zero := true
		for _, m := range []string{"events_missing", "events_extra"} {
			up, okU := f.at("exactkey", decUpstream, m, n)
			v, ok := f.at("exactkey", dec, m, n)
			ups, got = append(ups, valueOrDash(up, okU)), append(got, valueOrDash(v, ok))
			zero = zero && ok && v == 0
		}
		rows = append(rows, targetRow{scenario: "exactkey",
			target:   fmt.Sprintf("each of %s watchers gets exactly its object's events: missing / extra = 0", count(n)),
			upstream: strings.Join(ups, " / "), judged: strings.Join(got, " / "), ratio: "-", verdict: verdict(zero)})
	}
	return rows
}

// exactKeyRatio judges dec's metric (what, in unit) at n watchers against
// exactKeyMaxRatio of upstream's; false when either lacks it.
func exactKeyRatio(f figures, dec, metric, unit, what string, n int) (targetRow, bool) {
	up, okU := f.at("exactkey", decUpstream, metric, n)
	v, ok := f.at("exactkey", dec, metric, n)
	return targetRow{scenario: "exactkey",
		target:   fmt.Sprintf("%s <= %.1fx upstream's", what, exactKeyMaxRatio),
		upstream: formatValue(up) + " " + unit, judged: formatValue(v) + " " + unit,
		ratio: ratioOf(v, up), verdict: verdict(up > 0 && v/up <= exactKeyMaxRatio)}, okU && ok
}

// exactKeyFlatness judges dec's metric (what, in ms) at hi watchers over lo.
func exactKeyFlatness(f figures, dec, metric, what string, lo, hi int) targetRow {
	upLo, _ := f.at("exactkey", decUpstream, metric, lo)
	vLo, _ := f.at("exactkey", dec, metric, lo)
	upHi, _ := f.at("exactkey", decUpstream, metric, hi)
	vHi, _ := f.at("exactkey", dec, metric, hi)
	return targetRow{scenario: "exactkey",
		target:   fmt.Sprintf("%s flat from %s to %s watchers: %s/%s <= %.1fx", what, count(lo), count(hi), count(hi), count(lo), exactKeyMaxFlatness),
		upstream: fmt.Sprintf("%s -> %s ms (%s)", formatValue(upLo), formatValue(upHi), ratioOf(upHi, upLo)+"x"),
		judged:   fmt.Sprintf("%s -> %s ms (%s)", formatValue(vLo), formatValue(vHi), ratioOf(vHi, vLo)+"x"),
		ratio:    "-", verdict: verdict(vLo > 0 && vHi/vLo <= exactKeyMaxFlatness)}
}

func stormTargets(f figures) []targetRow {
	var rows []targetRow
	for _, t := range []struct{ metric, what string }{
		{"lag_p99_ms", "reflector lag p99 in the storm window"},
		{"initial_events_end_p99_ms", "WatchList time to initial-events-end p99"},
	} {
		up, okU := f.at("storm", decUpstream, t.metric, 0)
		wk, okW := f.at("storm", decWatchkeeper, t.metric, 0)
		if !okU && !okW {
			continue
		}
		rows = append(rows, targetRow{scenario: "storm", target: t.what + " <= upstream's",
			upstream: msOrDash(up, okU), judged: msOrDash(wk, okW),
			ratio: ratioOrDash(wk, okW, up, okU), verdict: verdict(okU && okW && wk <= up)})
		if t.metric == "lag_p99_ms" {
			rows = append(rows, targetRow{scenario: "storm", target: fmt.Sprintf("%s < %.0f ms", t.what, stormMaxLagMs),
				upstream: msOrDash(up, okU), judged: msOrDash(wk, okW), ratio: "-", verdict: verdict(okW && wk < stormMaxLagMs)})
		}
	}
	if len(rows) > 0 {
		var ups, wks []string
		zero := true
		for _, m := range []string{"watchlists_failed", "writes_missing_from_lag_watch"} {
			up, okU := f.at("storm", decUpstream, m, 0)
			wk, okW := f.at("storm", decWatchkeeper, m, 0)
			ups, wks = append(ups, valueOrDash(up, okU)), append(wks, valueOrDash(wk, okW))
			zero = zero && okW && wk == 0
		}
		rows = append(rows, targetRow{scenario: "storm", target: "WatchLists failed / writes the lag watch never got = 0",
			upstream: strings.Join(ups, " / "), judged: strings.Join(wks, " / "), ratio: "-", verdict: verdict(zero)})
	}
	return rows
}

// targetsTable renders the rows as the report's targets table, or "".
func targetsTable(rows []targetRow) string {
	return judgedTable("Targets (issues 13 and 29), judged on the figures above", decWatchkeeper, rows)
}

// floorTable renders exactkey's targets judged on the none run, or "": a
// target even no cache meets is one no cache can (issue 13.1).
func floorTable(results []result.Result) string {
	return judgedTable("The same exact-key targets held to no cache at all (`none`: one etcd3 watch of the prefix and a map "+
		"from key to the watches' channels, the least any cache that learns of writes from storage.Interface's Watch does), "+
		"with the same writes and clients", decNone, exactKeyTargets(indexFigures(results, "storage"), decNone))
}

// judgedTable renders rows, whose figures are judged's, under title.
func judgedTable(title, judged string, rows []targetRow) string {
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%s:\n\n", title)
	fmt.Fprintf(&b, "| scenario | target | upstream | %s | ratio %s/upstream | verdict |\n", judged, judged)
	b.WriteString("|---|---|---:|---:|---:|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", r.scenario, r.target, r.upstream, r.judged, r.ratio, r.verdict)
	}
	return b.String()
}

func verdict(met bool) string {
	if met {
		return "met"
	}
	return "missed"
}

func ratioOf(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3g", a/b)
}

func ratioOrDash(wk float64, okW bool, up float64, okU bool) string {
	return ratio(up, okU, wk, okW)
}

func msOrDash(v float64, ok bool) string {
	if !ok {
		return "not measured"
	}
	return formatValue(v) + " ms"
}

// count writes a watcher count as people say it: 1k, 100k.
func count(n int) string {
	if n >= 1000 && n%1000 == 0 {
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}
