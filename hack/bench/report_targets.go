package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
)

// targetRow is one target a scenario is held to, with the figures it is
// judged on and the verdict.
type targetRow struct {
	scenario, target      string
	upstream, watchkeeper string
	ratio, verdict        string
}

// Targets of issue 13's scenarios.
const (
	exactKeyMaxRatio    = 0.5 // watchkeeper's CPU per write at the largest N over upstream's
	exactKeyMaxFlatness = 1.2 // watchkeeper's CPU per write at the largest N over the smallest
	stormMaxLagMs       = 100.0
	// The HTTP fan-out (issue 13.4), on the median of its pairs.
	httpFanOutMinEventsRatio = 1.2
	httpFanOutMaxP99Ratio    = 1.0
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
	rows = append(rows, exactKeyTargets(f)...)
	rows = append(rows, stormTargets(f)...)
	rows = append(rows, httpFanOutTargets(indexFigures(results, "http"))...)
	return rows
}

// httpFanOutTargets judges the HTTP fan-out's events/s and p99 at each size
// both caches ran, on its figures (the median of its pairs, when paired).
func httpFanOutTargets(f figures) []targetRow {
	var sizes []int
	for _, r := range f["fanout|"+decWatchkeeper+"|events_delivered_per_second"] {
		sizes = append(sizes, r.Params["watchers"])
	}
	slices.Sort(sizes)
	var rows []targetRow
	for _, n := range slices.Compact(sizes) {
		of := "one run"
		if r, _ := f.result("fanout", decWatchkeeper, "events_delivered_per_second", n); r.Params[paramPairs] > 1 {
			of = fmt.Sprintf("the median of %d pairs", r.Params[paramPairs])
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
				upstream: formatValue(up) + " " + t.unit, watchkeeper: formatValue(wk) + " " + t.unit,
				ratio: ratioOf(wk, up), verdict: verdict(up > 0 && t.ok(wk/up))})
		}
	}
	return rows
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
func exactKeyTargets(f figures) []targetRow {
	const metric = "cpu_ms_per_write"
	var sizes []int
	for _, r := range f["exactkey|"+decWatchkeeper+"|"+metric] {
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
	// Both caches have the CPU per write at every size in sizes.
	row, _ := exactKeyRatio(f, metric, "ms", fmt.Sprintf("CPU per write at %s watchers", count(hi)), hi)
	rows = append(rows, row)
	if lo != hi {
		rows = append(rows, exactKeyFlatness(f, metric, "CPU per write", lo, hi))
		if _, ok := f.at("exactkey", decWatchkeeper, unwatchedMetric, hi); ok {
			rows = append(rows, exactKeyFlatness(f, unwatchedMetric, "CPU per write no watcher selects", lo, hi))
		}
	}
	if row, ok := exactKeyRatio(f, deliveryMetric, "us",
		fmt.Sprintf("CPU per delivery at %s watchers (the CPU per write above the unwatched writes', per event a watcher gets)", count(hi)), hi); ok {
		rows = append(rows, row)
	}
	for _, n := range sizes {
		var ups, wks []string
		zero := true
		for _, m := range []string{"events_missing", "events_extra"} {
			up, okU := f.at("exactkey", decUpstream, m, n)
			wk, okW := f.at("exactkey", decWatchkeeper, m, n)
			ups, wks = append(ups, valueOrDash(up, okU)), append(wks, valueOrDash(wk, okW))
			zero = zero && okW && wk == 0
		}
		rows = append(rows, targetRow{scenario: "exactkey",
			target:   fmt.Sprintf("each of %s watchers gets exactly its object's events: missing / extra = 0", count(n)),
			upstream: strings.Join(ups, " / "), watchkeeper: strings.Join(wks, " / "), ratio: "-", verdict: verdict(zero)})
	}
	return rows
}

// exactKeyRatio judges watchkeeper's metric (what, in unit) at n watchers
// against exactKeyMaxRatio of upstream's; false when either lacks it.
func exactKeyRatio(f figures, metric, unit, what string, n int) (targetRow, bool) {
	up, okU := f.at("exactkey", decUpstream, metric, n)
	wk, okW := f.at("exactkey", decWatchkeeper, metric, n)
	return targetRow{scenario: "exactkey",
		target:   fmt.Sprintf("%s <= %.1fx upstream's", what, exactKeyMaxRatio),
		upstream: formatValue(up) + " " + unit, watchkeeper: formatValue(wk) + " " + unit,
		ratio: ratioOf(wk, up), verdict: verdict(up > 0 && wk/up <= exactKeyMaxRatio)}, okU && okW
}

// exactKeyFlatness judges metric (what, in ms) at hi watchers over lo.
func exactKeyFlatness(f figures, metric, what string, lo, hi int) targetRow {
	upLo, _ := f.at("exactkey", decUpstream, metric, lo)
	wkLo, _ := f.at("exactkey", decWatchkeeper, metric, lo)
	upHi, _ := f.at("exactkey", decUpstream, metric, hi)
	wkHi, _ := f.at("exactkey", decWatchkeeper, metric, hi)
	return targetRow{scenario: "exactkey",
		target:      fmt.Sprintf("%s flat from %s to %s watchers: %s/%s <= %.1fx", what, count(lo), count(hi), count(hi), count(lo), exactKeyMaxFlatness),
		upstream:    fmt.Sprintf("%s -> %s ms (%s)", formatValue(upLo), formatValue(upHi), ratioOf(upHi, upLo)+"x"),
		watchkeeper: fmt.Sprintf("%s -> %s ms (%s)", formatValue(wkLo), formatValue(wkHi), ratioOf(wkHi, wkLo)+"x"),
		ratio:       "-", verdict: verdict(wkLo > 0 && wkHi/wkLo <= exactKeyMaxFlatness)}
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
			upstream: msOrDash(up, okU), watchkeeper: msOrDash(wk, okW),
			ratio: ratioOrDash(wk, okW, up, okU), verdict: verdict(okU && okW && wk <= up)})
		if t.metric == "lag_p99_ms" {
			rows = append(rows, targetRow{scenario: "storm", target: fmt.Sprintf("%s < %.0f ms", t.what, stormMaxLagMs),
				upstream: msOrDash(up, okU), watchkeeper: msOrDash(wk, okW), ratio: "-", verdict: verdict(okW && wk < stormMaxLagMs)})
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
			upstream: strings.Join(ups, " / "), watchkeeper: strings.Join(wks, " / "), ratio: "-", verdict: verdict(zero)})
	}
	return rows
}

// targetsTable renders the rows as the report's targets table, or "".
func targetsTable(rows []targetRow) string {
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\nTargets (issue 13), judged on the figures above:\n\n")
	b.WriteString("| scenario | target | upstream | watchkeeper | ratio watchkeeper/upstream | verdict |\n")
	b.WriteString("|---|---|---:|---:|---:|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", r.scenario, r.target, r.upstream, r.watchkeeper, r.ratio, r.verdict)
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
