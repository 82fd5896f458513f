package main

import (
	"fmt"
	"io"
	"time"

	"github.com/watchkeeper/watchkeeper/internal/histogram"
)

// pooled is one cache's rounds taken together: the scraped increases and
// the clients' histograms summed, so a p99 is the p99 of every round's
// calls or events. Two identical stock servers run one after the other
// (-calibrate) differ by up to 1.5x on a steady-phase p99 and favour
// whichever ran first; pooled over rounds in both orders, a ratio is no
// longer one order's.
type pooled struct {
	rounds  int
	acc     scraped
	steady  scraped
	watch   []*histogram.Histogram // every kubelet watch event, each round's pods and secrets/configmaps
	steadyW []*histogram.Histogram // those that arrived in the steady phase
	live    []*histogram.Histogram
	cpu     time.Duration
	// cpu split as result's is
	cpuByPhase  [nAPIPhases]time.Duration
	cpuShutdown time.Duration
	rssSum      int64 // peak RSS, summed over rounds for their mean
	atRelist    int64 // relists and 410s at the restart
	outside     int64 // relists and 410s outside it
}

func pool(rs []*result) *pooled {
	p := &pooled{rounds: len(rs), acc: scraped{}, steady: scraped{}}
	for _, r := range rs {
		for id, v := range r.acc {
			p.acc[id] += v
		}
		for id, v := range r.byPhase[apiSteady] {
			p.steady[id] += v
		}
		p.watch = append(p.watch, &r.st.podLatency, &r.st.objectLatency)
		p.steadyW = append(p.steadyW, &r.st.latencyByPhase[classPods][apiSteady], &r.st.latencyByPhase[classObjects][apiSteady])
		p.live = append(p.live, &r.st.live)
		p.cpu += r.cpu
		for ph, c := range r.cpuByPhase {
			p.cpuByPhase[ph] += c
		}
		p.cpuShutdown += r.cpuShutdown
		p.rssSum += r.peakRSS
		p.atRelist += r.st.sum(relistsOf, allClasses, phaseRestart) + r.st.sum(goneOf, allClasses, phaseRestart)
		p.outside += r.st.sum(relistsOf, allClasses, phaseSteady) + r.st.sum(goneOf, allClasses, phaseSteady)
	}
	return p
}

// printPooled prints the ratio targets judged on every round at once,
// when there was more than one.
func printPooled(w io.Writer, cfg config, wks, ups []*result) {
	if len(wks) < 2 || len(wks) != len(ups) {
		return
	}
	wk, up := pool(wks), pool(ups)
	fmt.Fprintf(w, "pooled over %d rounds, the order alternating: every round's calls and events taken together\n", wk.rounds)
	if cfg.calibrate {
		fmt.Fprintln(w, "A/A calibration (-calibrate): both columns ran the stock cache")
	}
	printFigureHeader(w)
	row := func(name string, a, b float64, format func(float64) string) { printFigure(w, name, a, b, format) }
	dur := asDur
	q := func(hs []*histogram.Histogram) float64 { return float64(histogram.Quantile(0.99, hs...)) }
	row("watch event latency p99, all kubelet watches", q(wk.watch), q(up.watch), dur)
	row("  arrived in the steady phase", q(wk.steadyW), q(up.steadyW), dur)
	row("  written while the watch was open (live)", q(wk.live), q(up.live), dur)
	row("kube-apiserver CPU, every round", float64(wk.cpu), float64(up.cpu), dur)
	printCPUByPhase(w, wk.cpuByPhase, up.cpuByPhase, wk.cpuShutdown, up.cpuShutdown)
	meanRSS := func(p *pooled) float64 { return float64(p.rssSum) / float64(p.rounds) }
	row("kube-apiserver peak RSS, mean of the rounds", meanRSS(wk), meanRSS(up), asMiB)
	row("relists and 410s at the restart", float64(wk.atRelist), float64(up.atRelist), asCount)
	fmt.Fprintln(w)
	target := func(met bool, name, detail string) { printTarget(w, "pooled target", met, name, detail) }
	judged, over := callsOverOne(apiLatencies(wk.acc), apiLatencies(up.acc))
	target(len(over) == 0, fmt.Sprintf("API call p99 <= 1.0x on every call with >= %d samples", minSamples),
		fmt.Sprintf("%d judged; over: %s", judged, orNone(over)))
	judged, over = callsOverOne(apiLatencies(wk.steady), apiLatencies(up.steady))
	target(len(over) == 0, "the same in the steady phase only", fmt.Sprintf("%d judged; over: %s", judged, orNone(over)))
	wr := safeRatio(q(wk.watch), q(up.watch))
	target(wr <= 0.8, "watch event latency p99 <= 0.8x", fmt.Sprintf("%.2fx", wr))
	rr := safeRatio(meanRSS(wk), meanRSS(up))
	target(rr <= 0.8, "kube-apiserver peak RSS <= 0.8x", fmt.Sprintf("%.2fx", rr))
	cr := safeRatio(float64(wk.cpu), float64(up.cpu))
	target(cr <= 0.9, "kube-apiserver CPU <= 0.9x", fmt.Sprintf("%.2fx", cr))
	target(wk.outside == 0 && wk.atRelist <= up.atRelist, "0 relists or 410s outside the restart, and at it no more than stock's",
		fmt.Sprintf("watchkeeper %d outside, %d at the restart; stock %d, %d", wk.outside, wk.atRelist, up.outside, up.atRelist))
	fmt.Fprintln(w)
}
