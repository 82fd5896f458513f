package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/watchkeeper/watchkeeper/e2e/internal/restartprobe"
	"github.com/watchkeeper/watchkeeper/internal/histogram"
)

// minSamples is the fewest calls of a kind, on each cache, for its p99
// ratio to be judged: below it the p99 is one or two calls.
const minSamples = 100

var allClasses = []class{classPods, classNode, classObjects, classDriver}

// printReport prints the API call table, the side-by-side figures with
// ratios, and the targets judged.
func printReport(w io.Writer, cfg config, wk, up *result) {
	fmt.Fprintf(w, "kube-load: %d nodes, %d pods, churn %.0f pods/s, measured %v (watchkeeper) and %v (stock)\n\n",
		cfg.nodes, cfg.pods, cfg.churnRate, wk.measured.Round(time.Second), up.measured.Round(time.Second))
	if cfg.calibrate {
		fmt.Fprintln(w, "A/A calibration (-calibrate): the column named watchkeeper ran the stock cache too; every ratio below is run-to-run noise, and every target judged is judged on it")
		fmt.Fprintln(w)
	}
	wa, ua := apiLatencies(wk.acc), apiLatencies(up.acc)
	sorted := callsOf(wa, ua)

	fmt.Fprintln(w, "API call latency, apiserver_request_duration_seconds over the run (calls with >= 20 on either cache):")
	fmt.Fprintf(w, "%-44s %8s %8s %9s %9s %9s %9s %7s %s\n", "call", "n wk", "n stock", "p50 wk", "p50 stock", "p99 wk", "p99 stock", "ratio", "SLO")
	var sloMiss, ratioMiss []string
	var overRatio, flagged []apiCall // over 1.0x; over 1.0x or over the SLO
	judged := 0
	for _, c := range sorted {
		a, b := wa[c], ua[c]
		overSLO := false
		for _, x := range []struct {
			name string
			l    latency
		}{{"watchkeeper", a}, {"stock", b}} {
			if x.l.count() > 0 && x.l.quantile(0.99) > c.threshold() {
				overSLO = true
				sloMiss = append(sloMiss, fmt.Sprintf("%s on %s: p99 %v > %v", c, x.name, fmtDur(x.l.quantile(0.99)), c.threshold()))
			}
		}
		r, ok := p99Ratio(a, b)
		if ok {
			judged++
			if r > 1.0 {
				overRatio = append(overRatio, c)
				ratioMiss = append(ratioMiss, fmt.Sprintf("%s %.2fx (%v vs %v)", c, r, fmtDur(a.quantile(0.99)), fmtDur(b.quantile(0.99))))
			}
		}
		if overSLO || (ok && r > 1.0) {
			flagged = append(flagged, c)
		}
		if a.count() < 20 && b.count() < 20 {
			continue
		}
		ratio := ""
		if ok {
			ratio = fmt.Sprintf("%.2fx", r)
		}
		fmt.Fprintf(w, "%-44s %8.0f %8.0f %9s %9s %9s %9s %7s %s\n", c, a.count(), b.count(),
			fmtDur(a.quantile(0.5)), fmtDur(b.quantile(0.5)), fmtDur(a.quantile(0.99)), fmtDur(b.quantile(0.99)), ratio, c.threshold())
	}
	fmt.Fprintln(w)
	printPhases(w, wk, up, flagged)
	printRestartRBAC(w, wk, up)
	for _, t := range phaseTables {
		printGroupsByPhase(w, wk, up, fmt.Sprintf(t.heading, metricName(t.metric), groupShown), t.group, t.by)
		if t.below != nil {
			t.below(w, wk, up)
		}
	}
	printCacheOutages(w, wk, up)

	printFigureHeader(w)
	row := func(name string, a, b float64, format func(float64) string) { printFigure(w, name, a, b, format) }
	dur, num, mib := asDur, asCount, asMiB
	rate := func(v float64) string { return fmt.Sprintf("%.1f/s", v) }
	q := func(h *histogram.Histogram, x float64) float64 { return float64(h.Quantile(x)) }
	both := func(r *result, x float64) float64 {
		return float64(histogram.Quantile(x, &r.st.podLatency, &r.st.objectLatency))
	}
	row("watch event latency p50, all kubelet watches", both(wk, 0.5), both(up, 0.5), dur)
	row("watch event latency p99, all kubelet watches", both(wk, 0.99), both(up, 0.99), dur)
	row("  p50, pods (WatchList by spec.nodeName)", q(&wk.st.podLatency, 0.5), q(&up.st.podLatency, 0.5), dur)
	row("  p99, pods", q(&wk.st.podLatency, 0.99), q(&up.st.podLatency, 0.99), dur)
	row("  p50, secrets/configmaps (per-object watches)", q(&wk.st.objectLatency, 0.5), q(&up.st.objectLatency, 0.5), dur)
	row("  p99, secrets/configmaps", q(&wk.st.objectLatency, 0.99), q(&up.st.objectLatency, 0.99), dur)
	row("  events timed (pods + secrets/configmaps)", float64(wk.st.podLatency.Count()+wk.st.objectLatency.Count()),
		float64(up.st.podLatency.Count()+up.st.objectLatency.Count()), num)
	printWatchLatencyByPhase(w, wk, up)
	row("  p99, written while the watch was open (live)", q(&wk.st.live, 0.99), q(&up.st.live, 0.99), dur)
	row("  writes learned after missing them (resumed watch or relist)", float64(wk.st.catchUp.Count()), float64(up.st.catchUp.Count()), num)
	row("    their p99, write to arrival", q(&wk.st.catchUp, 0.99), q(&up.st.catchUp, 0.99), dur)
	row("kube-apiserver CPU over the run", float64(wk.cpu), float64(up.cpu), dur)
	printCPUByPhase(w, wk.cpuByPhase, up.cpuByPhase, wk.cpuShutdown, up.cpuShutdown)
	row("machine CPU busy over the run, every process", float64(wk.host.busy), float64(up.host.busy), dur)
	row("  of it the load, etcd, controllers and kwok", float64(wk.helpersCPU), float64(up.helpersCPU), dur)
	others := func(r *result) float64 { return float64(max(0, r.host.busy-r.host.steal-r.cpu-r.helpersCPU)) }
	row("  of it processes not of this run (noise)", others(wk), others(up), dur)
	row("  of it taken by the host (steal: work waited for a CPU)", float64(wk.host.steal), float64(up.host.steal), dur)
	for p := range nAPIPhases {
		gc := func(r *result, name string) float64 { return r.byPhase[p].sumOf(name, nil) }
		if gc(wk, gcCycles)+gc(up, gcCycles) == 0 {
			continue
		}
		row(fmt.Sprintf("kube-apiserver GC cycles, %s phase", p), gc(wk, gcCycles), gc(up, gcCycles), num)
		row("  their stop-the-world pauses, summed", gc(wk, gcPauses)*float64(time.Second), gc(up, gcPauses)*float64(time.Second), dur)
	}
	row("kube-apiserver peak RSS", float64(wk.peakRSS), float64(up.peakRSS), mib)
	for i, name := range []string{"  as it stood at the measured run's start (the ramp)", "  as it stood at the restart (steady phase, storm)", "  the restarted process's"} {
		if wk.rssPeaks[i] > 0 || up.rssPeaks[i] > 0 {
			row(name, float64(wk.rssPeaks[i]), float64(up.rssPeaks[i]), mib)
		}
	}
	row("kube-apiserver heap in use (before the storm)", float64(wk.heap.total), float64(up.heap.total), mib)
	row("  of it the caches' (cacher and etcd3 watch stacks)", float64(wk.heap.caches), float64(up.heap.caches), mib)
	count := func(f func(*counters) *atomic.Int64, p ...phase) func(*result) float64 {
		return func(r *result) float64 { return float64(r.st.sum(f, allClasses, p...)) }
	}
	relists, gone := relistsOf, goneOf
	ended := func(c *counters) *atomic.Int64 { return &c.endedByServer }
	for _, x := range []struct {
		name string
		f    func(*result) float64
	}{
		{"relists by clients, outside the restart", count(relists, phaseSteady)},
		{"relists by clients, at the restart (SIGTERM to the run's end)", count(relists, phaseRestart)},
		{"410s seen by clients, outside the restart", count(gone, phaseSteady)},
		{"410s seen by clients, at the restart", count(gone, phaseRestart)},
		{"watches ended by the server, outside the restart", count(ended, phaseSteady)},
		{"watches ended by the server, at the restart", count(ended, phaseRestart)},
	} {
		row(x.name, x.f(wk), x.f(up), num)
	}
	for _, cl := range allClasses {
		fmt.Fprintf(w, "  %-56s %14s %14s\n", classNames[cl]+": relists/410s/ended/errors",
			classSummary(wk.st, cl), classSummary(up.st, cl))
	}
	serverLists := func(r *result) float64 {
		return r.acc.sumOf("apiserver_request_total", map[string]string{"verb": "LIST"}) +
			r.acc.sumOf("apiserver_watch_list_duration_seconds_count", nil)
	}
	row("initial lists served (LISTs + WatchLists, every client)", serverLists(wk), serverLists(up), num)
	terminated := func(r *result) float64 { return r.acc.sumOf("apiserver_terminated_watchers_total", nil) }
	row("watchers the cache terminated (too slow: terminated_watchers)", terminated(wk), terminated(up), num)
	dropped := func(r *result) float64 { return r.acc.sumOf("watchkeeper_watch_cache_dropped_total", nil) }
	row("events owed but dropped (watchkeeper_watch_cache_dropped)", dropped(wk), dropped(up), num)
	row("pod startup p50 (created to Running, one watch)", q(&wk.tracker.startup, 0.5), q(&up.tracker.startup, 0.5), dur)
	row("pod startup p99", q(&wk.tracker.startup, 0.99), q(&up.tracker.startup, 0.99), dur)
	row("pods created", float64(wk.tracker.created.Load())/wk.measured.Seconds(), float64(up.tracker.created.Load())/up.measured.Seconds(), rate)
	row("start storm: WatchLists synced, p50", float64(quantileOf(wk.stormSync, 0.5)), float64(quantileOf(up.stormSync, 0.5)), dur)
	row("start storm: p99", float64(quantileOf(wk.stormSync, 0.99)), float64(quantileOf(up.stormSync, 0.99)), dur)
	row("start storm: last", float64(lastOf(wk.stormSync)), float64(lastOf(up.stormSync)), dur)
	row("restart: SIGTERM to ready again", float64(wk.restartDown), float64(up.restartDown), dur)
	row("restart: kubelets watching pods again, after the exit, p99", float64(quantileOf(wk.reconnect, 0.99)), float64(quantileOf(up.reconnect, 0.99)), dur)
	printRestartChecks(w, wk, up)
	row("stamped writes (pods, secrets/configmaps)", float64(wk.podStamps.Load()+wk.objStamps.Load()), float64(up.podStamps.Load()+up.objStamps.Load()), num)
	row("failed writes of the load (stamps, scaling)", float64(wk.writeErrors.Load()+wk.churnErrors.Load()), float64(up.writeErrors.Load()+up.churnErrors.Load()), num)
	fmt.Fprintf(w, "views at the end: watchkeeper: %s; stock: %s\n", wk.consistency, up.consistency)
	if wk.stormUnsynced+up.stormUnsynced+wk.unreconnected+up.unreconnected > 0 {
		fmt.Fprintf(w, "not synced after the storm's 2m: watchkeeper %d, stock %d; not watching 2m after the restart: watchkeeper %d, stock %d\n",
			wk.stormUnsynced, up.stormUnsynced, wk.unreconnected, up.unreconnected)
	}
	fmt.Fprintln(w)

	// The targets, watchkeeper against stock, same run.
	target := func(met bool, name, detail string) { printTarget(w, "target", met, name, detail) }
	target(len(sloMiss) == 0, "every SLO met (API call p99 <= 1s / 5s / 30s)", orNone(sloMiss))
	target(len(ratioMiss) == 0, fmt.Sprintf("API call p99 <= 1.0x on every call with >= %d samples", minSamples),
		fmt.Sprintf("%d judged; over: %s", judged, orNone(ratioMiss)))
	steadyMet, steadyDetail := judgeSteady(wk, up, overRatio)
	target(steadyMet, fmt.Sprintf("API call p99 <= 1.0x in the steady phase only (outside the storm and the restart), on every call with >= %d samples there", minSamples),
		steadyDetail)
	wr := safeRatio(both(wk, 0.99), both(up, 0.99))
	target(wr <= 0.8, "watch event latency p99 <= 0.8x", fmt.Sprintf("%.2fx (%v vs %v)", wr, fmtDur(time.Duration(both(wk, 0.99))), fmtDur(time.Duration(both(up, 0.99)))))
	rr := safeRatio(float64(wk.peakRSS), float64(up.peakRSS))
	target(rr <= 0.8, "kube-apiserver peak RSS <= 0.8x", fmt.Sprintf("%.2fx (%d vs %d MiB)", rr, wk.peakRSS>>20, up.peakRSS>>20))
	cr := safeRatio(float64(wk.cpu), float64(up.cpu))
	target(cr <= 0.9, "kube-apiserver CPU <= 0.9x", fmt.Sprintf("%.2fx (%v vs %v)", cr, wk.cpu.Round(100*time.Millisecond), up.cpu.Round(100*time.Millisecond)))
	outside := count(relists, phaseSteady)(wk) + count(gone, phaseSteady)(wk)
	target(outside == 0, "0 relists or 410s outside the restart", fmt.Sprintf("watchkeeper %.0f relists, %.0f 410s; stock %.0f, %.0f",
		count(relists, phaseSteady)(wk), count(gone, phaseSteady)(wk), count(relists, phaseSteady)(up), count(gone, phaseSteady)(up)))
	atW := count(relists, phaseRestart)(wk) + count(gone, phaseRestart)(wk)
	atU := count(relists, phaseRestart)(up) + count(gone, phaseRestart)(up)
	target(atW <= atU, "relists and 410s at the restart no more than stock's", fmt.Sprintf("watchkeeper %.0f relists, %.0f 410s; stock %.0f, %.0f",
		count(relists, phaseRestart)(wk), count(gone, phaseRestart)(wk), count(relists, phaseRestart)(up), count(gone, phaseRestart)(up)))
	target(wk.consistent, "every kubelet's view consistent with the server's at the end (no lost event)", wk.consistency)
	printProfileDiffs(w, wk, up)
}

// printFigureHeader and printFigure print the side-by-side figures: a
// name, each cache's value as format prints it, and their ratio.
func printFigureHeader(w io.Writer) {
	fmt.Fprintf(w, "%-58s %14s %14s %8s\n", "figure", "watchkeeper", "stock", "ratio")
}

func printFigure(w io.Writer, name string, a, b float64, format func(float64) string) {
	fmt.Fprintf(w, "%-58s %14s %14s %8s\n", name, format(a), format(b), fmtRatio(a, b))
}

// The formats of a figure's values.
func asDur(v float64) string   { return fmtDur(time.Duration(v)) }
func asCount(v float64) string { return fmt.Sprintf("%.0f", v) }
func asMiB(v float64) string   { return fmt.Sprintf("%.0f MiB", v/(1<<20)) }

// relistsOf and goneOf pick a client class's relists and 410s.
func relistsOf(c *counters) *atomic.Int64 { return &c.relists }
func goneOf(c *counters) *atomic.Int64    { return &c.gone }

// printTarget prints one target's verdict: what (a run's target, or the
// rounds' pooled one), met or MISSED, its name and the figures.
func printTarget(w io.Writer, what string, met bool, name, detail string) {
	verdict := "met   "
	if !met {
		verdict = "MISSED"
	}
	fmt.Fprintf(w, "%s %s %s: %s\n", what, verdict, name, detail)
}

// latencyRow is a row of printWatchLatencyByPhase: the classes it
// pools, all their events or only the live ones.
type latencyRow struct {
	what    string
	classes []class
	live    bool
}

// printWatchLatencyByPhase prints the watch event latency rows above
// split by the phase each event arrived in: steady, the start storm
// (until the restart's SIGTERM) and the restart (from the
// SIGTERM until the run's end, so the events written while the server
// was down and delivered after count there); a line per phase for all
// kubelet watches, then its pods and secrets/configmaps; phases where
// neither cache timed an event are left out. The restart adds its pods
// and secrets/configmaps again, live: only events written while the watch
// that delivered them was open.
func printWatchLatencyByPhase(w io.Writer, wk, up *result) {
	fmt.Fprintf(w, "  %-20s %-20s %9s %9s %9s %9s %8s %8s %8s\n", "by phase (arrival)", "watches", "p50 wk", "p50 stock", "p99 wk", "p99 stock", "ratio", "n wk", "n stock")
	for p := range nAPIPhases {
		of := func(r *result, live bool, classes ...class) []*histogram.Histogram {
			byPhase := &r.st.latencyByPhase
			if live {
				byPhase = &r.st.liveByPhase
			}
			var hs []*histogram.Histogram
			for _, c := range classes {
				hs = append(hs, &byPhase[c][p])
			}
			return hs
		}
		count := func(hs []*histogram.Histogram) float64 {
			var n uint64
			for _, h := range hs {
				n += h.Count()
			}
			return float64(n)
		}
		name := p.String()
		rows := []latencyRow{
			{"all kubelet", []class{classPods, classObjects}, false},
			{"  pods", []class{classPods}, false},
			{"  secrets/configmaps", []class{classObjects}, false},
		}
		if p == apiRestart {
			// Without the resumed watches' catch-up, which only
			// watchkeeper's restart times (liveByPhase).
			rows = append(rows, latencyRow{"  pods, live", []class{classPods}, true},
				latencyRow{"  s/c, live", []class{classObjects}, true})
		}
		for _, x := range rows {
			a, b := of(wk, x.live, x.classes...), of(up, x.live, x.classes...)
			if x.what == "all kubelet" && count(a)+count(b) == 0 {
				break
			}
			q := func(hs []*histogram.Histogram, v float64) time.Duration { return histogram.Quantile(v, hs...) }
			ratio := "-" // no ratio where a cache timed nothing
			if count(a) > 0 && count(b) > 0 {
				ratio = fmtRatio(float64(q(a, 0.99)), float64(q(b, 0.99)))
			}
			fmt.Fprintf(w, "  %-20s %-20s %9s %9s %9s %9s %8s %8.0f %8.0f\n", name, x.what,
				fmtDur(q(a, 0.5)), fmtDur(q(b, 0.5)), fmtDur(q(a, 0.99)), fmtDur(q(b, 0.99)), ratio, count(a), count(b))
			name = ""
		}
	}
}

// restartChecksShown is how many of each cache's /readyz checks the
// report shows, the last to pass.
const restartChecksShown = 3

// printRestartChecks prints the restart's /readyz timeline of either
// cache: the exit to the first answer, the new process's CPU to ready, and
// the checks that failed after the first answer: the last three to pass on
// each cache, with how long each failed on either (- where it did not
// fail), * on the last to pass.
func printRestartChecks(w io.Writer, wk, up *result) {
	rw, ru := &wk.restartReadyz, &up.restartReadyz
	firstAnswer := func(tl *restartprobe.Timeline) string {
		if !tl.Answered {
			return "none"
		}
		return fmtDur(tl.FirstAnswer)
	}
	fmt.Fprintf(w, "%-58s %14s %14s %8s\n", "restart: exit to the new process's first /readyz answer", firstAnswer(rw), firstAnswer(ru),
		fmtRatio(float64(rw.FirstAnswer), float64(ru.FirstAnswer)))
	fmt.Fprintf(w, "%-58s %14s %14s %8s\n", "restart: the new kube-apiserver's CPU, start to ready", fmtDur(wk.restartCPU), fmtDur(up.restartCPU),
		fmtRatio(float64(wk.restartCPU), float64(up.restartCPU)))
	if aw, au := wk.admissionWait, up.admissionWait; aw.samples+au.samples > 0 {
		printFigure(w, "restart: requests waiting in admission for informers, peak", float64(aw.peak), float64(au.peak), asCount)
		printFigure(w, "  their request-seconds, sampled each second for 40s", aw.waitSeconds*float64(time.Second), au.waitSeconds*float64(time.Second), asDur)
	}
	fmt.Fprintf(w, "restart: /readyz checks failing after the first answer (the last %d to pass on each cache, how long each failed; * the last):\n", restartChecksShown)
	var names []string
	seen := map[string]bool{}
	for _, tl := range []*restartprobe.Timeline{rw, ru} {
		for i, c := range tl.Checks {
			if i < restartChecksShown && !seen[c.Name] {
				seen[c.Name] = true
				names = append(names, c.Name)
			}
		}
	}
	if len(names) == 0 {
		fmt.Fprintln(w, "  none")
		return
	}
	cell := func(tl *restartprobe.Timeline, name string) (string, time.Duration) {
		last := map[string]bool{}
		for _, c := range tl.LastToPass() {
			last[c.Name] = true
		}
		for _, c := range tl.Checks {
			if c.Name != name {
				continue
			}
			s := fmtDur(c.Failed)
			if c.StillFailing {
				s += " still"
			}
			if last[name] {
				s += "*"
			} else {
				s += " " // the column aligned with the marked
			}
			return s, c.Failed
		}
		return "- ", 0
	}
	for _, n := range names {
		a, da := cell(rw, n)
		b, db := cell(ru, n)
		ratio := ""
		if da > 0 && db > 0 {
			ratio = fmtRatio(float64(da), float64(db))
		}
		fmt.Fprintln(w, strings.TrimRight(fmt.Sprintf("  %-56s %14s %14s %8s", n, a, b, ratio), " "))
	}
}

// callsOf is the calls of the histograms, sorted.
func callsOf(ls ...map[apiCall]latency) []apiCall {
	seen := map[apiCall]bool{}
	var out []apiCall
	for _, l := range ls {
		for c := range l {
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// p99Ratio is watchkeeper's p99 over stock's, judged (ok) only when each
// cache has at least minSamples calls.
func p99Ratio(wk, up latency) (r float64, ok bool) {
	if wk.count() < minSamples || up.count() < minSamples {
		return 0, false
	}
	return safeRatio(float64(wk.quantile(0.99)), float64(up.quantile(0.99))), true
}

// printPhases prints, for the calls flagged by the whole run (over 1.0x
// or over their SLO), each phase's calls and p99 on either cache.
func printPhases(w io.Writer, wk, up *result, flagged []apiCall) {
	took := func(p apiPhase) string {
		return fmt.Sprintf("%v wk / %v stock", wk.phaseTook[p].Round(100*time.Millisecond), up.phaseTook[p].Round(100*time.Millisecond))
	}
	fmt.Fprintf(w, "API call latency by phase (steady: outside the storm and the restart, %s; storm: from the storm until the restart, %s; restart: from SIGTERM to the run's end, %s), the calls above over 1.0x or over their SLO:\n",
		took(apiSteady), took(apiStorm), took(apiRestart))
	if len(flagged) == 0 {
		fmt.Fprintf(w, "none\n\n")
		return
	}
	var wl, ul [nAPIPhases]map[apiCall]latency
	for p := range nAPIPhases {
		wl[p], ul[p] = apiLatencies(wk.byPhase[p]), apiLatencies(up.byPhase[p])
	}
	fmt.Fprintf(w, "%-44s %-8s %8s %8s %9s %9s %7s\n", "call", "phase", "n wk", "n stock", "p99 wk", "p99 stock", "ratio")
	for _, c := range flagged {
		name := c.String()
		for p := range nAPIPhases {
			a, b := wl[p][c], ul[p][c]
			if a.count() == 0 && b.count() == 0 {
				continue
			}
			ratio := ""
			if r, ok := p99Ratio(a, b); ok {
				ratio = fmt.Sprintf("%.2fx", r)
			}
			fmt.Fprintf(w, "%-44s %-8s %8.0f %8.0f %9s %9s %7s\n", name, p, a.count(), b.count(), fmtDur(a.quantile(0.99)), fmtDur(b.quantile(0.99)), ratio)
			name = ""
		}
	}
	fmt.Fprintln(w)
}

// rbacResources are the RBAC API's: a restarted kube-apiserver's
// rbac/bootstrap-roles hook reads each of its roles and bindings while its
// caches start, a few calls a restart, too few for the tables above; their
// p99 there was several times stock's (issue 50).
var rbacResources = []string{"clusterroles", "clusterrolebindings", "roles", "rolebindings"}

// printRestartRBAC prints the restart phase's RBAC calls, however few: of a
// few calls the p99 is about the slowest one's bucket.
func printRestartRBAC(w io.Writer, wk, up *result) {
	wl, ul := apiLatencies(wk.byPhase[apiRestart]), apiLatencies(up.byPhase[apiRestart])
	calls := slices.DeleteFunc(callsOf(wl, ul), func(c apiCall) bool { return !slices.Contains(rbacResources, c.resource) })
	fmt.Fprintln(w, "RBAC calls in the restart phase, any count (the restarted server's bootstrap reads):")
	if len(calls) == 0 {
		fmt.Fprintf(w, "none\n\n")
		return
	}
	fmt.Fprintf(w, "%-44s %8s %8s %9s %9s %7s\n", "call", "n wk", "n stock", "p99 wk", "p99 stock", "ratio")
	for _, c := range calls {
		a, b := wl[c], ul[c]
		ratio := ""
		if a.count() > 0 && b.count() > 0 {
			ratio = fmt.Sprintf("%.2fx", safeRatio(float64(a.quantile(0.99)), float64(b.quantile(0.99))))
		}
		fmt.Fprintf(w, "%-44s %8.0f %8.0f %9s %9s %7s\n", c, a.count(), b.count(), fmtDur(a.quantile(0.99)), fmtDur(b.quantile(0.99)), ratio)
	}
	fmt.Fprintln(w)
}

// groupShown is the fewest requests of a group (a priority level, an etcd
// operation), in a phase on either cache, for its row to be shown.
const groupShown = 20

// phaseTables are the report's tables of one histogram by phase and by a
// group of its series, in the order printed; heading formats the metric's
// name and groupShown, and below (if any) prints more under the table.
var phaseTables = []struct {
	heading, metric, group string
	by                     func(scraped) map[string]latency
	below                  func(w io.Writer, wk, up *result)
}{
	// Where a call's p99 is queueing behind others of its priority level
	// rather than its own work.
	{"API Priority and Fairness queue wait (%s, executed requests), by phase and priority level with >= %d requests:",
		apfWait, "priority level", apfWaits, nil},
	// Whether a call's p99 over stock's is time spent waiting for etcd
	// (which runs in the load's process, on the same two cores) or in the
	// server.
	{"etcd request latency seen by kube-apiserver (%s), by phase and operation with >= %d requests:",
		etcdRequest, "operation", etcdLatencies, printSlowestEtcd},
	// How long reads and watches waited for each resource's cache to catch
	// up with etcd: a wait holds the request's seat in its priority level,
	// so the calls queued behind it in that level wait too.
	{"watch cache read wait (%s), by phase and resource with >= %d waits:",
		cacheReadWait, "resource", cacheReadWaits, nil},
	// Of that wait, etcd's answer to the cache's progress requests
	// (watchkeeper's only): the storm's nodes watches waited 84-99 ms at
	// 300 nodes against stock's 16-34 (issue 50, item 4).
	{"watchkeeper's progress request to etcd's answer (%s), by phase and resource with >= %d answers:",
		progressAnswer, "resource", progressAnswers, nil},
	// Where a call's p99 goes when neither its queue wait nor its etcd
	// requests account for it (its handler logs a trace past 500ms, at
	// -v=2).
	{"time in kube-apiserver's filters before the handler (%s), every request, by phase and filter with >= %d requests:",
		filterLatency, "filter", filterLatencies, nil},
	{"kube-apiserver's goroutines waiting to run (%s), by phase (rows of >= %d):",
		schedLatency, "", schedLatencies, nil},
}

// printSlowestEtcd names, per phase, the slowest etcd operations on one
// resource on each cache, below the etcd table.
func printSlowestEtcd(w io.Writer, wk, up *result) {
	fmt.Fprintf(w, "  the %d slowest (p99) etcd operations on one resource, by phase, any count:\n", slowestShown)
	for p := range nAPIPhases {
		a, b := slowestEtcd(wk.byPhase[p], slowestShown), slowestEtcd(up.byPhase[p], slowestShown)
		if len(a)+len(b) == 0 {
			continue
		}
		fmt.Fprintf(w, "    %-8s watchkeeper: %s\n", p, orNone(a))
		fmt.Fprintf(w, "    %-8s stock:       %s\n", p, orNone(b))
	}
	fmt.Fprintln(w)
}

// metricName is a histogram's name without its series' suffix.
func metricName(bucket string) string { return strings.TrimSuffix(bucket, "_bucket") }

// slowestShown is how many of the slowest etcd operations on one resource
// the report names per phase and cache.
const slowestShown = 3

// slowestEtcd names the n (operation, resource) pairs with the highest
// etcd request p99 in acc: the table by operation sums every resource, so
// one slow list among hundreds of fast ones shows only here.
func slowestEtcd(acc scraped, n int) []string {
	type opOn struct{ op, resource string }
	by := bucketsBy(acc, etcdRequest, func(l map[string]string) (opOn, bool) {
		return opOn{l["operation"], groupResource(l)}, true
	})
	p99 := map[opOn]time.Duration{}
	for k, l := range by {
		if l.count() > 0 {
			p99[k] = l.quantile(0.99)
		}
	}
	keys := slices.Collect(maps.Keys(p99))
	slices.SortFunc(keys, func(a, b opOn) int {
		if c := cmp.Compare(p99[b], p99[a]); c != 0 {
			return c
		}
		return cmp.Compare(a.op+" "+a.resource, b.op+" "+b.resource)
	})
	var out []string
	for _, k := range keys[:min(n, len(keys))] {
		out = append(out, fmt.Sprintf("%s %s %v (n %.0f)", k.op, k.resource, fmtDur(p99[k]), by[k].count()))
	}
	return out
}

// printGroupsByPhase prints one row per phase and group of group's
// latencies with requests enough on either cache.
func printGroupsByPhase(w io.Writer, wk, up *result, heading, groupName string, group func(scraped) map[string]latency) {
	fmt.Fprintln(w, heading)
	fmt.Fprintf(w, "%-8s %-28s %8s %8s %9s %9s %9s %9s %7s\n", "phase", groupName, "n wk", "n stock", "p50 wk", "p50 stock", "p99 wk", "p99 stock", "ratio")
	shown := 0
	for p := range nAPIPhases {
		a, b := group(wk.byPhase[p]), group(up.byPhase[p])
		keys := map[string]bool{}
		for k := range a {
			keys[k] = true
		}
		for k := range b {
			keys[k] = true
		}
		for _, k := range slices.Sorted(maps.Keys(keys)) {
			x, y := a[k], b[k]
			if x.count() < groupShown && y.count() < groupShown {
				continue
			}
			shown++
			ratio := ""
			if x.count() > 0 && y.count() > 0 {
				ratio = fmtRatio(float64(x.quantile(0.99)), float64(y.quantile(0.99)))
			}
			fmt.Fprintf(w, "%-8s %-28s %8.0f %8.0f %9s %9s %9s %9s %7s\n", p, k, x.count(), y.count(),
				quantileOrDash(x, 0.5), quantileOrDash(y, 0.5), quantileOrDash(x, 0.99), quantileOrDash(y, 0.99), ratio)
		}
	}
	if shown == 0 {
		fmt.Fprintln(w, "none")
	}
	fmt.Fprintln(w)
}

// quantileOrDash is l's q quantile, or "-" for a series one cache has
// none of (watchkeeper's own series).
func quantileOrDash(l latency, q float64) string {
	if l.count() == 0 {
		return "-"
	}
	return fmtDur(l.quantile(q))
}

// callsOverOne lists the calls with minSamples on both caches whose p99
// is over stock's, of how many were judged.
func callsOverOne(wa, ua map[apiCall]latency) (judged int, over []string) {
	for _, c := range callsOf(wa, ua) {
		if r, ok := p99Ratio(wa[c], ua[c]); ok {
			judged++
			if r > 1.0 {
				over = append(over, fmt.Sprintf("%s %.2fx (%v vs %v)", c, r, fmtDur(wa[c].quantile(0.99)), fmtDur(ua[c].quantile(0.99))))
			}
		}
	}
	return judged, over
}

// judgeSteady judges the p99 ratio over the steady phase alone, on every
// call with enough samples there, and says of each call over 1.0x on the
// whole run (missed) whether its miss is in the steady phase.
func judgeSteady(wk, up *result, missed []apiCall) (bool, string) {
	ws, us := apiLatencies(wk.byPhase[apiSteady]), apiLatencies(up.byPhase[apiSteady])
	judged, over := callsOverOne(ws, us)
	var placed []string
	for _, c := range missed {
		r, ok := p99Ratio(ws[c], us[c])
		switch {
		case !ok:
			placed = append(placed, fmt.Sprintf("%s not judged in steady (n %.0f vs %.0f)", c, ws[c].count(), us[c].count()))
		case r > 1.0:
			placed = append(placed, fmt.Sprintf("%s in steady (%.2fx)", c, r))
		default:
			placed = append(placed, fmt.Sprintf("%s not in steady (%.2fx)", c, r))
		}
	}
	return len(over) == 0, fmt.Sprintf("%d judged; over: %s; the whole run's misses: %s", judged, orNone(over), orNone(placed))
}

// printProfileDiffs names the functions whose share of kube-apiserver's
// CPU and of its heap differ most between the caches, when profiles were
// taken (-profile-dir).
func printProfileDiffs(w io.Writer, wk, up *result) {
	for _, x := range []struct {
		what, a, b, sampleType string
	}{
		{"CPU", wk.prof.cpuPath, up.prof.cpuPath, "cpu"},
		{"heap in use", wk.prof.heapPath, up.prof.heapPath, "inuse_space"},
		{"CPU of the restarted process", wk.prof.restartCPUPath, up.prof.restartCPUPath, "cpu"},
	} {
		if x.a == "" || x.b == "" {
			continue
		}
		rows, err := topDiff(x.a, x.b, x.sampleType, 8)
		if err != nil {
			fmt.Fprintf(w, "profiles, %s: %v\n", x.what, err)
			continue
		}
		fmt.Fprintf(w, "\n%s: watchkeeper (%s) vs stock (%s); then the shared functions that differ most, cumulative:\n", x.what, x.a, x.b)
		for _, r := range rows {
			fmt.Fprintln(w, "  "+r)
		}
	}
}

func classSummary(st *stats, cl class) string {
	var r, g, e, o int64
	for p := phaseSteady; p < nPhases; p++ {
		c := &st.c[cl][p]
		r += c.relists.Load()
		g += c.gone.Load()
		e += c.endedByServer.Load()
		o += c.otherErrors.Load() + c.forbidden.Load()
	}
	return fmt.Sprintf("%d/%d/%d/%d", r, g, e, o)
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, "; ")
}

func safeRatio(a, b float64) float64 {
	if b == 0 {
		if a == 0 {
			return 1
		}
		return 99
	}
	return a / b
}

func fmtRatio(a, b float64) string {
	if b == 0 {
		if a == 0 {
			return "-"
		}
		return "inf"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	default:
		return d.Round(100 * time.Millisecond).String()
	}
}

// printCPUByPhase splits kube-apiserver's CPU over the run by phase, the
// old process's shutdown on its own line: where a difference in the whole
// run's CPU comes from.
func printCPUByPhase(w io.Writer, wk, up [nAPIPhases]time.Duration, wkShutdown, upShutdown time.Duration) {
	for p := range nAPIPhases {
		name := fmt.Sprintf("  of it the %s phase", p)
		if p == apiRestart {
			name = "  of it the restart phase (the new process, from its start)"
		}
		if wk[p]+up[p] > 0 {
			printFigure(w, name, float64(wk[p]), float64(up[p]), asDur)
		}
	}
	if wkShutdown+upShutdown > 0 {
		printFigure(w, "  of it the old process's shutdown (SIGTERM to exit)", float64(wkShutdown), float64(upShutdown), asDur)
	}
}
