package main

import (
	"context"
	"fmt"
	"maps"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/watchkeeper/watchkeeper/e2e/internal/kubecluster"
	"github.com/watchkeeper/watchkeeper/e2e/internal/restartprobe"
)

// fakeResult is a run's result with the figures the targets judge.
func fakeResult(cache string, le float64, watchLatency time.Duration, cpu time.Duration, rss int64, relists int64) *result {
	st := &stats{}
	r := &result{cache: cache, st: st, tracker: newPodTracker(st), measured: time.Minute, cpu: cpu, peakRSS: rss, consistent: true}
	withPhases(r, getPods(le), nil, nil)
	for range 100 {
		st.podLatency.Record(watchLatency)
	}
	st.c[classPods][phaseSteady].relists.Add(relists)
	return r
}

// getPods is 200 GETs of pods, in buckets up to 0.05, 0.2, 0.4, 2 and
// +Inf: 190 under 0.05s, 10 in the bucket up to le (0.2, 0.4 or 2). p99,
// rank 198, is 8/10 into that bucket.
func getPods(le float64) scraped {
	s := scraped{}
	for _, b := range []float64{0.05, 0.2, 0.4, 2, math.Inf(1)} {
		n := 200.0
		if b < le {
			n = 190
		}
		s[seriesID(requestDuration, map[string]string{"le": strconv.FormatFloat(b, 'g', -1, 64), "verb": "GET", "resource": "pods", "subresource": "", "scope": "resource"})] = n
	}
	return s
}

// withPhases sets a result's increase per phase, and the whole run's as
// their sum.
func withPhases(r *result, steady, storm, restart scraped) {
	p := phased{inc: [nAPIPhases]scraped{steady, storm, restart}}
	r.acc, r.byPhase = p.total(), p.inc
}

func verdicts(out string) map[string]string {
	v := map[string]string{}
	re := regexp.MustCompile(`(?m)^target (met   |MISSED) ([^:]+):`)
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		v[m[2]] = strings.TrimSpace(m[1])
	}
	return v
}

func TestTargetsJudgeWatchkeeperAgainstStock(t *testing.T) {
	cfg := config{nodes: 10, pods: 100, churnRate: 20}
	// watchkeeper: better on every figure.
	wk := fakeResult("watchkeeper", 0.2, 10*time.Millisecond, 50*time.Second, 700<<20, 0)
	up := fakeResult("upstream", 0.4, 20*time.Millisecond, 60*time.Second, 1000<<20, 0)
	var b strings.Builder
	printReport(&b, cfg, wk, up)
	for name, v := range verdicts(b.String()) {
		if v != "met" {
			t.Errorf("%s: %s, want met\n%s", name, v, b.String())
		}
	}
	if got := len(verdicts(b.String())); got != 9 {
		t.Errorf("%d targets judged, want 9:\n%s", got, b.String())
	}

	// watchkeeper: worse on every figure, a relist outside the restart,
	// a GET over the SLO.
	wk = fakeResult("watchkeeper", 2, 30*time.Millisecond, 70*time.Second, 900<<20, 3)
	b.Reset()
	printReport(&b, cfg, wk, up)
	v := verdicts(b.String())
	for _, name := range []string{
		"every SLO met (API call p99 <= 1s / 5s / 30s)",
		"API call p99 <= 1.0x on every call with >= 100 samples",
		steadyTarget,
		"watch event latency p99 <= 0.8x",
		"kube-apiserver peak RSS <= 0.8x",
		"kube-apiserver CPU <= 0.9x",
		"0 relists or 410s outside the restart",
	} {
		if v[name] != "MISSED" {
			t.Errorf("%q: %q, want MISSED\n%s", name, v[name], b.String())
		}
	}
	if !strings.Contains(b.String(), "GET pods resource on watchkeeper: p99 1680.0ms > 1s") {
		t.Errorf("the SLO miss does not name the call and cache:\n%s", b.String())
	}
}

const steadyTarget = "API call p99 <= 1.0x in the steady phase only (outside the storm and the restart), on every call with >= 100 samples there"

func TestPhasesPlaceAWholeRunMissInTime(t *testing.T) {
	cfg := config{nodes: 10, pods: 100, churnRate: 20}
	wk := fakeResult("watchkeeper", 0.2, 10*time.Millisecond, 50*time.Second, 700<<20, 0)
	up := fakeResult("upstream", 0.2, 20*time.Millisecond, 60*time.Second, 1000<<20, 0)
	// Steady and storm equal on both caches (p99 170ms); at the restart
	// watchkeeper has its 10 slow calls in (0.4, 2] (p99 1.68s), stock in
	// (0.05, 0.2]. Over the whole run (600 calls, rank 594):
	// 0.4 + 1.6*4/10 = 1.04s against 0.05 + 0.15*24/30 = 170ms.
	withPhases(wk, getPods(0.2), getPods(0.2), getPods(2))
	withPhases(up, getPods(0.2), getPods(0.2), getPods(0.2))
	var b strings.Builder
	printReport(&b, cfg, wk, up)
	out := b.String()
	v := verdicts(out)
	if v["API call p99 <= 1.0x on every call with >= 100 samples"] != "MISSED" || v[steadyTarget] != "met" {
		t.Errorf("whole run %q, steady %q; want MISSED, met:\n%s", v["API call p99 <= 1.0x on every call with >= 100 samples"], v[steadyTarget], out)
	}
	for _, want := range []string{
		"GET pods resource 6.12x (1040.0ms vs 170.0ms)",
		"1 judged; over: none; the whole run's misses: GET pods resource not in steady (1.00x)",
		// The phase table: the call (over 1.0x and over its SLO), a row
		// per phase.
		"GET pods resource                            steady        200      200   170.0ms   170.0ms   1.00x\n" +
			"                                             storm         200      200   170.0ms   170.0ms   1.00x\n" +
			"                                             restart       200      200  1680.0ms   170.0ms   9.88x\n\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}

	// The same miss in the steady phase instead; no storm this time.
	withPhases(wk, getPods(2), nil, getPods(0.2))
	withPhases(up, getPods(0.2), nil, getPods(0.2))
	b.Reset()
	printReport(&b, cfg, wk, up)
	out = b.String()
	if want := "GET pods resource                            steady        200      200  1680.0ms   170.0ms   9.88x\n" +
		"                                             restart       200      200   170.0ms   170.0ms   1.00x\n\n"; !strings.Contains(out, want) {
		t.Errorf("the phase table is not steady and restart alone, %q:\n%s", want, out)
	}
	if v := verdicts(out); v[steadyTarget] != "MISSED" {
		t.Errorf("steady %q, want MISSED:\n%s", v[steadyTarget], out)
	}
	if want := "1 judged; over: GET pods resource 9.88x (1680.0ms vs 170.0ms); the whole run's misses: GET pods resource in steady (9.88x)"; !strings.Contains(out, want) {
		t.Errorf("the report lacks %q:\n%s", want, out)
	}
}

func TestRatios(t *testing.T) {
	for _, tc := range []struct {
		a, b  float64
		ratio float64
		text  string
	}{
		{1, 2, 0.5, "0.50x"},
		{0, 0, 1, "-"},
		{3, 0, 99, "inf"},
	} {
		if got := safeRatio(tc.a, tc.b); math.Abs(got-tc.ratio) > 1e-9 {
			t.Errorf("safeRatio(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.ratio)
		}
		if got := fmtRatio(tc.a, tc.b); got != tc.text {
			t.Errorf("fmtRatio(%v, %v) = %q, want %q", tc.a, tc.b, got, tc.text)
		}
	}
}

// restartTimeline is a restart's /readyz answers after an exit at t0:
// each answer 1s apart, from 1s, the checks it marks failed; nil is 200.
func restartTimeline(answers ...[]string) restartprobe.Timeline {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var polls []restartprobe.Poll
	for i, failed := range answers {
		p := restartprobe.Poll{At: t0.Add(time.Duration(i+1) * time.Second), Status: http.StatusOK}
		if failed != nil {
			p.Status, p.Failed = http.StatusInternalServerError, failed
		}
		polls = append(polls, p)
	}
	return restartprobe.Analyze(polls, t0)
}

func TestReportShowsTheRestartsLastReadyzChecksOfEachCache(t *testing.T) {
	cfg := config{nodes: 10, pods: 100, churnRate: 20}
	wk := fakeResult("watchkeeper", 0.2, 10*time.Millisecond, 50*time.Second, 700<<20, 0)
	up := fakeResult("upstream", 0.2, 20*time.Millisecond, 60*time.Second, 1000<<20, 0)
	rbac := "poststarthook/rbac/bootstrap-roles"
	// watchkeeper: five checks failing; informer-sync and rbac pass last
	// (at 6s, failed 5s), then watch-caches (at 3s, failed 2s), then a and
	// b (at 2s, failed 1s), not shown.
	wk.restartReadyz = restartTimeline(
		[]string{"a", "b", "watch-caches", "informer-sync", rbac},
		[]string{"watch-caches", "informer-sync", rbac},
		[]string{"informer-sync", rbac},
		[]string{"informer-sync", rbac},
		[]string{"informer-sync", rbac},
		nil)
	wk.restartCPU = 14 * time.Second
	// stock: informer-sync, 2s, the last; "a", 1s, shown as stock's second.
	up.restartReadyz = restartTimeline([]string{"informer-sync", "a"}, []string{"informer-sync"}, nil)
	up.restartCPU = 7 * time.Second
	var b strings.Builder
	printReport(&b, cfg, wk, up)
	out := b.String()
	for _, want := range []string{
		"restart: exit to the new process's first /readyz answer          1000.0ms       1000.0ms    1.00x\n",
		"restart: the new kube-apiserver's CPU, start to ready                 14s       7000.0ms    2.00x\n",
		"restart: /readyz checks failing after the first answer (the last 3 to pass on each cache, how long each failed; * the last):\n" +
			"  informer-sync                                                 5000.0ms*      2000.0ms*    2.50x\n" +
			"  " + rbac + "                            5000.0ms*             -\n" +
			"  watch-caches                                                  2000.0ms              -\n" +
			"  a                                                             1000.0ms       1000.0ms     1.00x\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks\n%s\nin\n%s", want, out)
		}
	}
}

// notReadySeries is a scrape of watchkeeper's readiness series: not-ready
// transitions of resource (group g) by reason, reads sent to etcd by verb
// and reason.
func notReadySeries(g, resource string, transitions map[string]float64, reads map[[2]string]float64) scraped {
	var samples []kubecluster.Sample
	for reason, v := range transitions {
		samples = append(samples, sample(notReadyTotal, v, "group", g, "resource", resource, "reason", reason))
	}
	for vr, v := range reads {
		samples = append(samples, sample(readsToStorageTotal, v, "group", g, "resource", resource, "verb", vr[0], "reason", vr[1]))
	}
	return scrapeOf(samples...)
}

func merged(s ...scraped) scraped {
	out := scraped{}
	for _, x := range s {
		maps.Copy(out, x)
	}
	return out
}

func TestReportShowsWhereTheCachesWentNotReady(t *testing.T) {
	cfg := config{nodes: 10, pods: 100, churnRate: 20}
	wk := fakeResult("watchkeeper", 0.2, 10*time.Millisecond, 50*time.Second, 700<<20, 0)
	up := fakeResult("upstream", 0.2, 20*time.Millisecond, 60*time.Second, 1000<<20, 0)
	// Steady: nodes silent twice, 118 GETs and 2 lists sent to etcd
	// meanwhile, 40 consistent GETs besides; leases' series all zero.
	// Restart: pods relisted once, nothing read meanwhile.
	steady := merged(getPods(0.2),
		notReadySeries("", "nodes", map[string]float64{"storage_silent": 2, "relist": 0},
			map[[2]string]float64{{"get", "not_ready"}: 118, {"list", "not_ready"}: 2, {"get", "consistent"}: 40}),
		notReadySeries("coordination.k8s.io", "leases", map[string]float64{"storage_silent": 0},
			map[[2]string]float64{{"get", "not_ready"}: 0}))
	restart := merged(getPods(0.2), notReadySeries("", "pods", map[string]float64{"relist": 1}, nil))
	withPhases(wk, steady, nil, restart)
	var b strings.Builder
	printReport(&b, cfg, wk, up)
	out := b.String()
	want := "watch caches going not ready (watchkeeper_watch_cache_not_ready_total, by reason) and the reads they sent to etcd meanwhile (watchkeeper_watch_cache_reads_to_storage_total{reason=\"not_ready\"}, by verb), by phase:\n" +
		"  watchkeeper steady   nodes: not ready 2 (storage_silent 2), 120 (get 118, list 2) reads to etcd meanwhile\n" +
		"  watchkeeper storm    none\n" +
		"  watchkeeper restart  pods: not ready 1 (relist 1), 0 reads to etcd meanwhile\n" +
		"  stock       none\n" +
		"  watchkeeper every read sent to etcd over the run, by verb/reason: 160 (get/consistent 40, get/not_ready 118, list/not_ready 2)\n" +
		"  stock       every read sent to etcd over the run, by verb/reason: 0\n\n"
	if !strings.Contains(out, want) {
		t.Errorf("the report lacks\n%s\nin\n%s", want, out)
	}

	// Two resources in one phase, by name; a group is part of the name.
	withPhases(wk, merged(getPods(0.2),
		notReadySeries("coordination.k8s.io", "leases", map[string]float64{"storage_silent": 1}, map[[2]string]float64{{"get", "not_ready"}: 3}),
		notReadySeries("", "configmaps", map[string]float64{"storage_watch_failing": 1}, nil)), nil, nil)
	b.Reset()
	printReport(&b, cfg, wk, up)
	if want := "  watchkeeper steady   configmaps: not ready 1 (storage_watch_failing 1), 0 reads to etcd meanwhile; leases.coordination.k8s.io: not ready 1 (storage_silent 1), 3 (get 3) reads to etcd meanwhile\n"; !strings.Contains(b.String(), want) {
		t.Errorf("the report lacks\n%s\nin\n%s", want, b.String())
	}
}

// stamped is a MODIFIED event of a pod (or configmap) written at
// written, its stamp new to the watcher.
func stamped(kind, name string, written time.Time) watch.Event {
	meta := metav1.ObjectMeta{Namespace: "ns", Name: name, Annotations: map[string]string{stampAnnotation: strconv.FormatInt(written.UnixNano(), 10)}}
	if kind == "pods" {
		return watch.Event{Type: watch.Modified, Object: &corev1.Pod{ObjectMeta: meta}}
	}
	return watch.Event{Type: watch.Modified, Object: &corev1.ConfigMap{ObjectMeta: meta}}
}

// observeIn times n events of a pod watch and n of a configmap watch
// of r's kubelets, each lat after its write, in the run's phase ph (and
// the storm if storm).
func observeIn(r *result, ph phase, storm bool, n int, pods, objects time.Duration) {
	r.st.phase.Store(int32(ph))
	r.st.storm.Store(storm)
	podLW := newCountingLW(nil, r.st, classPods, &r.st.podLatency)
	objLW := newCountingLW(nil, r.st, classObjects, &r.st.objectLatency)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range n {
		name := fmt.Sprintf("%v-%d-%d", storm, ph, i)
		// Watches called an hour ago: every event written while open.
		podLW.observe(stamped("pods", name, now.Add(-pods)), now, false, now.Add(-time.Hour))
		objLW.observe(stamped("configmaps", name, now.Add(-objects)), now, false, now.Add(-time.Hour))
	}
	r.st.phase.Store(int32(phaseRamp))
	r.st.storm.Store(false)
}

// watchReport is the report of two runs whose only watch latencies are
// what observe times.
// reportOf is the report of two fake results (200 GETs of pods each, as
// fakeResult makes them) after set has changed them.
func reportOf(set func(wk, up *result)) string {
	cfg := config{nodes: 10, pods: 100, churnRate: 20}
	wk := fakeResult("watchkeeper", 0.2, 0, 50*time.Second, 700<<20, 0)
	up := fakeResult("upstream", 0.2, 0, 60*time.Second, 1000<<20, 0)
	set(wk, up)
	var b strings.Builder
	printReport(&b, cfg, wk, up)
	return b.String()
}

func watchReport(observe func(wk, up *result)) string {
	return reportOf(func(wk, up *result) {
		wk.st, up.st = &stats{}, &stats{}
		observe(wk, up)
	})
}

func TestWatchLatencyIsSplitByPhase(t *testing.T) {
	out := watchReport(func(wk, up *result) {
		// Steady: equal on both caches. Storm: watchkeeper's pods 4x
		// stock's. Restart: watchkeeper's events 10s late, stock's 1s.
		observeIn(wk, phaseSteady, false, 100, 10*time.Millisecond, 20*time.Millisecond)
		observeIn(up, phaseSteady, false, 100, 10*time.Millisecond, 20*time.Millisecond)
		observeIn(wk, phaseSteady, true, 50, 400*time.Millisecond, 20*time.Millisecond)
		observeIn(up, phaseSteady, true, 50, 100*time.Millisecond, 20*time.Millisecond)
		observeIn(wk, phaseRestart, false, 10, 10*time.Second, 10*time.Second)
		observeIn(up, phaseRestart, false, 10, time.Second, time.Second)
		// Outside the measured run: not timed.
		observeIn(wk, phaseRamp, false, 10, time.Minute, time.Minute)
	})
	for _, want := range []string{
		// The whole run's rows as before; the ramp's events not timed.
		"watch event latency p99, all kubelet watches                     9999.2ms       1000.0ms   10.00x\n",
		"  events timed (pods + secrets/configmaps)                            320            320    1.00x\n" +
			"  by phase (arrival)   watches                 p50 wk p50 stock    p99 wk p99 stock    ratio     n wk  n stock\n" +
			"  steady               all kubelet             10.0ms    10.0ms    20.0ms    20.0ms    1.00x      200      200\n" +
			"                         pods                  10.0ms    10.0ms    10.0ms    10.0ms    1.00x      100      100\n" +
			"                         secrets/configmaps    20.0ms    20.0ms    20.0ms    20.0ms    1.00x      100      100\n" +
			"  storm                all kubelet             20.1ms    20.1ms   400.0ms   100.0ms    4.00x      100      100\n" +
			"                         pods                 400.0ms   100.0ms   400.0ms   100.0ms    4.00x       50       50\n" +
			"                         secrets/configmaps    20.0ms    20.0ms    20.0ms    20.0ms    1.00x       50       50\n" +
			"  restart              all kubelet           9999.2ms  1000.0ms  9999.2ms  1000.0ms   10.00x       20       20\n" +
			"                         pods                9999.2ms  1000.0ms  9999.2ms  1000.0ms   10.00x       10       10\n" +
			"                         secrets/configmaps  9999.2ms  1000.0ms  9999.2ms  1000.0ms   10.00x       10       10\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks\n%s\nin\n%s", want, out)
		}
	}
}

func TestWatchLatencyByPhaseLeavesOutPhasesWithoutEvents(t *testing.T) {
	out := watchReport(func(wk, up *result) {
		// No storm; a restart only stock timed events in.
		observeIn(wk, phaseSteady, false, 10, 10*time.Millisecond, 10*time.Millisecond)
		observeIn(up, phaseSteady, false, 10, 10*time.Millisecond, 10*time.Millisecond)
		observeIn(up, phaseRestart, false, 10, time.Second, time.Second)
	})
	if strings.Contains(out, "\n  storm ") {
		t.Errorf("a storm line with no event timed in the storm:\n%s", out)
	}
	if want := "  restart              all kubelet                  0  1000.0ms         0  1000.0ms        -        0       20\n"; !strings.Contains(out, want) {
		t.Errorf("the report lacks\n%s\nin\n%s", want, out)
	}
}

// At the restart a resumed watch delivers what was written while the
// server was down, its latency the downtime, where a relist learns the
// same writes in a list: the restart's live rows leave that catch-up out,
// so both caches are compared on the events of open watches.
func TestRestartLatencyHasLiveRowsWithoutTheCatchUp(t *testing.T) {
	out := watchReport(func(wk, up *result) {
		observeIn(wk, phaseRestart, false, 100, 100*time.Millisecond, 100*time.Millisecond)
		observeIn(up, phaseRestart, false, 100, 200*time.Millisecond, 200*time.Millisecond)
		// watchkeeper's resumed pod watches: ten writes made 20s ago,
		// while the server was down, delivered by a watch opened 5s ago.
		wk.st.phase.Store(int32(phaseRestart))
		lw := newCountingLW(nil, wk.st, classPods, &wk.st.podLatency)
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		for i := range 10 {
			lw.observe(stamped("pods", fmt.Sprintf("away-%d", i), now.Add(-20*time.Second)), now, false, now.Add(-5*time.Second))
		}
		wk.st.phase.Store(int32(phaseRamp))
	})
	for _, want := range []string{
		"                         pods                 100.1ms   200.0ms       20s   200.0ms   99.99x      110      100\n",
		"                         pods, live           100.0ms   200.0ms   100.0ms   200.0ms    0.50x      100      100\n" +
			"                         s/c, live            100.0ms   200.0ms   100.0ms   200.0ms    0.50x      100      100\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks\n%s\nin\n%s", want, out)
		}
	}
}

// fakeLister answers every list with its configmaps.
type fakeLister struct{ items []corev1.ConfigMap }

func (f fakeLister) ListWithContext(context.Context, metav1.ListOptions) (runtime.Object, error) {
	return &corev1.ConfigMapList{Items: f.items}, nil
}

func (f fakeLister) WatchWithContext(context.Context, metav1.ListOptions) (watch.Interface, error) {
	return watch.NewEmptyWatch(), nil
}

// A client that was away learns the writes it missed from a resumed
// watch (watchkeeper) or a relist (stock): the report times both as
// catching up, and the events written while a watch was open apart.
func TestWatchLatencySplitsCatchUpFromLive(t *testing.T) {
	out := watchReport(func(wk, up *result) {
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		away := func(i int) string { return fmt.Sprintf("away-%d", i) }
		for _, r := range []*result{wk, up} {
			r.st.phase.Store(int32(phaseSteady))
			lw := newCountingLW(nil, r.st, classObjects, &r.st.objectLatency)
			for i := range 100 {
				lw.observe(stamped("configmaps", fmt.Sprintf("live-%d", i), now.Add(-10*time.Millisecond)), now, false, now.Add(-time.Second))
			}
		}
		// Before the measured run, each client saw ten objects.
		wk.st.phase.Store(int32(phaseRamp))
		up.st.phase.Store(int32(phaseRamp))
		resumed := newCountingLW(nil, wk.st, classObjects, &wk.st.objectLatency)
		relisted := newCountingLW(nil, up.st, classObjects, &up.st.objectLatency)
		for i := range 10 {
			resumed.observe(stamped("configmaps", away(i), now.Add(-time.Hour)), now.Add(-time.Hour), false, now.Add(-2*time.Hour))
			relisted.observe(stamped("configmaps", away(i), now.Add(-time.Hour)), now.Add(-time.Hour), false, now.Add(-2*time.Hour))
		}
		wk.st.phase.Store(int32(phaseSteady))
		up.st.phase.Store(int32(phaseSteady))
		// watchkeeper's watch resumed 5s ago and delivered the ten
		// writes made 20s ago, while the client was away.
		for i := range 10 {
			resumed.observe(stamped("configmaps", away(i), now.Add(-20*time.Second)), now, false, now.Add(-5*time.Second))
		}
		// Stock's client relisted: the same ten writes, two objects it
		// never saw and one it saw, unchanged.
		var items []corev1.ConfigMap
		for i := range 10 {
			items = append(items, *stamped("configmaps", away(i), now.Add(-20*time.Second)).Object.(*corev1.ConfigMap))
		}
		items = append(items,
			*stamped("configmaps", "new-1", now.Add(-20*time.Second)).Object.(*corev1.ConfigMap),
			*stamped("configmaps", "new-2", now.Add(-20*time.Second)).Object.(*corev1.ConfigMap))
		relisted.inner = fakeLister{items: items}
		relisted.clock = func() time.Time { return now }
		if _, err := relisted.ListWithContext(context.Background(), metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	row := func(name string, wk, up, ratio string) string {
		return fmt.Sprintf("%-58s %14s %14s %8s\n", name, wk, up, ratio)
	}
	for _, want := range []string{
		row("  p99, written while the watch was open (live)", "10.0ms", "10.0ms", "1.00x"),
		row("  writes learned after missing them (resumed watch or relist)", "10", "10", "1.00x"),
		row("    their p99, write to arrival", "20s", "20s", "1.00x"),
		// The resumed watch's ten are watch events; the relist's are not.
		row("  events timed (pods + secrets/configmaps)", "110", "100", "1.10x"),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks\n%s\nin\n%s", want, out)
		}
	}
}

// heldWatcher's watch call returns after the server held it for hold (a
// resume waiting for a backfill), with the events sent meanwhile queued.
type heldWatcher struct {
	fakeLister
	now    *time.Time
	hold   time.Duration
	events []watch.Event
}

func (h heldWatcher) WatchWithContext(context.Context, metav1.ListOptions) (watch.Interface, error) {
	*h.now = h.now.Add(h.hold)
	w := watch.NewFakeWithChanSize(len(h.events), false)
	for _, ev := range h.events {
		w.Action(ev.Type, ev.Object)
	}
	return w, nil
}

// A write made while the server held the watch call is one the client
// missed (its watch was not open yet), not a live event: stock's client
// learns the same writes from its relist, which counts as catching up.
func TestWriteWhileTheWatchCallIsHeldIsCatchUp(t *testing.T) {
	st := &stats{}
	st.phase.Store(int32(phaseSteady))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	called := now
	lw := newCountingLW(heldWatcher{
		now:  &now,
		hold: 3 * time.Second,
		events: []watch.Event{
			stamped("pods", "held", called.Add(time.Second)),   // written while held
			stamped("pods", "live", called.Add(3*time.Second)), // as it opened
		},
	}, st, classPods, &st.podLatency)
	lw.clock = func() time.Time { return now }
	w, err := lw.WatchWithContext(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for range 2 {
		<-w.ResultChan()
	}
	if n := st.catchUp.Count(); n != 1 {
		t.Errorf("%d catch-up events, want 1 (the write made while the call was held)", n)
	}
	if n := st.live.Count(); n != 1 {
		t.Errorf("%d live events, want 1", n)
	}
}

// apfWaitsOf is n executed requests of a priority level that waited in
// its queue: 98% under 10ms, 2% in the bucket up to le; plus n rejected
// ones (execute=false) that must not count.
func apfWaitsOf(level string, n, le float64) scraped {
	s := scraped{}
	for _, exec := range []string{"true", "false"} {
		maps.Copy(s, histogramOf(apfWait, map[string]string{"priority_level": level, "flow_schema": "fs", "execute": exec}, n, le))
	}
	return s
}

// histogramOf is n observations of the histogram name with labels: 98%
// under 10ms, 2% in the bucket up to le.
func histogramOf(name string, labels map[string]string, n, le float64) scraped {
	s := scraped{}
	for _, b := range []float64{0.01, 0.1, 1, 10, math.Inf(1)} {
		c := n
		if b < le {
			c = 0.98 * n
		}
		l := maps.Clone(labels)
		l["le"] = strconv.FormatFloat(b, 'g', -1, 64)
		s[seriesID(name, l)] = c
	}
	return s
}

func TestReportShowsQueueWaitByPriorityLevelAndPhase(t *testing.T) {
	// Steady: system-nodes' tail waits up to 1s on watchkeeper, 0.1s on
	// stock; a level of 10 requests is left out. Restart: equal.
	out := reportOf(func(wk, up *result) {
		wk.byPhase[apiSteady] = merged(wk.byPhase[apiSteady], apfWaitsOf("system-nodes", 1000, 1), apfWaitsOf("catch-all", 10, 10))
		up.byPhase[apiSteady] = merged(up.byPhase[apiSteady], apfWaitsOf("system-nodes", 1000, 0.1), apfWaitsOf("catch-all", 10, 10))
		wk.byPhase[apiRestart] = apfWaitsOf("workload-low", 100, 0.1)
		up.byPhase[apiRestart] = apfWaitsOf("workload-low", 100, 0.1)
	})
	want := "phase    priority level                   n wk  n stock    p50 wk p50 stock    p99 wk p99 stock   ratio\n" +
		"steady   system-nodes                     1000     1000     5.1ms     5.1ms   550.0ms    55.0ms  10.00x\n" +
		"restart  workload-low                      100      100     5.1ms     5.1ms    55.0ms    55.0ms   1.00x\n\n"
	if !strings.Contains(out, want) {
		t.Errorf("the report lacks\n%s\nin\n%s", want, out)
	}
}

func TestReportShowsEtcdRequestLatencyByOperationAndPhase(t *testing.T) {
	// Steady: updates of two resources, summed into one row, slower on
	// watchkeeper; a list of 10 requests left out.
	pods := map[string]string{"operation": "update", "group": "", "resource": "pods"}
	leases := map[string]string{"operation": "update", "group": "coordination.k8s.io", "resource": "leases"}
	lists := map[string]string{"operation": "list", "group": "", "resource": "pods"}
	out := reportOf(func(wk, up *result) {
		wk.byPhase[apiSteady] = merged(wk.byPhase[apiSteady], histogramOf(etcdRequest, pods, 500, 1), histogramOf(etcdRequest, leases, 500, 1), histogramOf(etcdRequest, lists, 10, 10))
		up.byPhase[apiSteady] = merged(up.byPhase[apiSteady], histogramOf(etcdRequest, pods, 500, 0.1), histogramOf(etcdRequest, leases, 500, 0.1), histogramOf(etcdRequest, lists, 10, 10))
	})
	wantInReport(t, out, "etcd request latency seen by kube-apiserver (etcd_request_duration_seconds), by phase and operation with >= 20 requests:\n"+
		"phase    operation                        n wk  n stock    p50 wk p50 stock    p99 wk p99 stock   ratio\n"+
		"steady   update                           1000     1000     5.1ms     5.1ms   550.0ms    55.0ms  10.00x\n\n")
}

func TestReportShowsCacheReadWaitByResourceAndPhase(t *testing.T) {
	// Storm: nodes' WatchLists wait up to 1s for watchkeeper's cache, 0.1s
	// for stock's; leases, 10 waits, left out.
	nodes := map[string]string{"group": "", "resource": "nodes"}
	leases := map[string]string{"group": "coordination.k8s.io", "resource": "leases"}
	out := reportOf(func(wk, up *result) {
		wk.byPhase[apiStorm] = merged(histogramOf(cacheReadWait, nodes, 300, 1), histogramOf(cacheReadWait, leases, 10, 10))
		up.byPhase[apiStorm] = merged(histogramOf(cacheReadWait, nodes, 300, 0.1), histogramOf(cacheReadWait, leases, 10, 10))
	})
	wantInReport(t, out, "watch cache read wait (apiserver_watch_cache_read_wait_seconds), by phase and resource with >= 20 waits:\n"+
		"phase    resource                         n wk  n stock    p50 wk p50 stock    p99 wk p99 stock   ratio\n"+
		"storm    nodes                             300      300     5.1ms     5.1ms   550.0ms    55.0ms  10.00x\n\n")
}

func TestReportShowsProgressAnswersByResourceAndPhase(t *testing.T) {
	// Storm: the nodes cache's requests answered within 1s; stock has no
	// such series.
	nodes := map[string]string{"group": "", "resource": "nodes"}
	out := reportOf(func(wk, up *result) {
		wk.byPhase[apiStorm] = histogramOf(progressAnswer, nodes, 40, 1)
	})
	wantInReport(t, out, "watchkeeper's progress request to etcd's answer (watchkeeper_watch_cache_progress_request_answer_seconds), by phase and resource with >= 20 answers:\n"+
		"phase    resource                         n wk  n stock    p50 wk p50 stock    p99 wk p99 stock   ratio\n"+
		"storm    nodes                              40        0     5.1ms         -   550.0ms         -        \n\n")
}

func TestReportShowsFilterLatencyByFilterAndPhase(t *testing.T) {
	// Restart: authentication up to 1s on watchkeeper, 0.1s on stock.
	authn := map[string]string{"filter": "authentication"}
	out := reportOf(func(wk, up *result) {
		wk.byPhase[apiRestart] = histogramOf(filterLatency, authn, 2000, 1)
		up.byPhase[apiRestart] = histogramOf(filterLatency, authn, 2000, 0.1)
	})
	wantInReport(t, out, "time in kube-apiserver's filters before the handler (apiserver_request_filter_duration_seconds), every request, by phase and filter with >= 20 requests:\n"+
		"phase    filter                           n wk  n stock    p50 wk p50 stock    p99 wk p99 stock   ratio\n"+
		"restart  authentication                   2000     2000     5.1ms     5.1ms   550.0ms    55.0ms  10.00x\n\n")
}

func TestReportCountsGCCyclesByPhase(t *testing.T) {
	// Steady: 60 collections on watchkeeper against 30 on stock, pausing
	// 0.12 and 0.06s in all.
	out := reportOf(func(wk, up *result) {
		wk.byPhase[apiSteady] = merged(wk.byPhase[apiSteady], scraped{gcCycles: 60, gcPauses: 0.12})
		up.byPhase[apiSteady] = merged(up.byPhase[apiSteady], scraped{gcCycles: 30, gcPauses: 0.06})
	})
	wantInReport(t, out,
		"kube-apiserver GC cycles, steady phase                                 60             30    2.00x\n",
		"  their stop-the-world pauses, summed                             120.0ms         60.0ms    2.00x\n")
	if strings.Contains(out, "GC cycles, storm phase") {
		t.Errorf("GC rows for a phase without collections:\n%s", out)
	}
}

func TestReportShowsSchedulingLatencyByPhase(t *testing.T) {
	out := reportOf(func(wk, up *result) {
		wk.byPhase[apiSteady] = merged(wk.byPhase[apiSteady], histogramOf(schedLatency, map[string]string{}, 10000, 1))
		up.byPhase[apiSteady] = merged(up.byPhase[apiSteady], histogramOf(schedLatency, map[string]string{}, 10000, 0.1))
	})
	wantInReport(t, out, "kube-apiserver's goroutines waiting to run (go_sched_latencies_seconds), by phase (rows of >= 20):\n"+
		"phase                                     n wk  n stock    p50 wk p50 stock    p99 wk p99 stock   ratio\n"+
		"steady   goroutines                      10000    10000     5.1ms     5.1ms   550.0ms    55.0ms  10.00x\n\n")
}

// wantInReport fails t for each of wants that out lacks.
func wantInReport(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks\n%q\nin\n%s", want, out)
		}
	}
}

func TestReportNamesTheSlowestEtcdOperationOnOneResource(t *testing.T) {
	// At the restart, hundreds of fast updates and two slow lists of pods
	// on watchkeeper: the table by operation does not show the lists (too
	// few), the slowest line does, first.
	update := map[string]string{"operation": "update", "group": "coordination.k8s.io", "resource": "leases"}
	list := map[string]string{"operation": "listStream", "group": "", "resource": "pods"}
	out := reportOf(func(wk, up *result) {
		wk.byPhase[apiRestart] = merged(histogramOf(etcdRequest, update, 500, 0.1), histogramOf(etcdRequest, list, 2, 10))
		up.byPhase[apiRestart] = histogramOf(etcdRequest, update, 500, 0.1)
	})
	if strings.Contains(out, "    steady   watchkeeper:") {
		t.Errorf("a slowest line for a phase without etcd requests:\n%s", out)
	}
	wantInReport(t, out,
		"    restart  watchkeeper: listStream pods 5500.0ms (n 2); update leases.coordination.k8s.io 55.0ms (n 500)\n",
		"    restart  stock:       update leases.coordination.k8s.io 55.0ms (n 500)\n")
}

func TestCalibrateRunsTheStockCacheInBothColumns(t *testing.T) {
	for _, tc := range []struct {
		calibrate bool
		cache     string
		want      string
	}{
		{false, "watchkeeper", "watchkeeper"},
		{false, "upstream", "upstream"},
		{true, "watchkeeper", "upstream"},
		{true, "upstream", "upstream"},
	} {
		l := &load{cfg: config{calibrate: tc.calibrate}, cache: tc.cache}
		if got := l.decorator(); got != tc.want {
			t.Errorf("calibrate %v, column %s: decorator %s, want %s", tc.calibrate, tc.cache, got, tc.want)
		}
	}
}

// The peak RSS is split by the part of the run that set it: the ramp (as
// it stood at the measured run's start), the run up to the restart, and
// the restarted process.
func TestReportSplitsThePeakRSSByPartOfTheRun(t *testing.T) {
	out := reportOf(func(wk, up *result) {
		wk.rssPeaks = [3]int64{500 << 20, 900 << 20, 700 << 20}
		up.rssPeaks = [3]int64{600 << 20, 1000 << 20, 800 << 20}
	})
	for _, want := range []struct{ name, wk, up string }{
		{"as it stood at the measured run's start (the ramp)", "500 MiB", "600 MiB"},
		{"as it stood at the restart (steady phase, storm)", "900 MiB", "1000 MiB"},
		{"the restarted process's", "700 MiB", "800 MiB"},
	} {
		line := lineWith(t, out, want.name)
		if !strings.Contains(line, want.wk) || !strings.Contains(line, want.up) || strings.Index(line, want.wk) > strings.Index(line, want.up) {
			t.Errorf("the line %q lacks %s then %s", line, want.wk, want.up)
		}
	}
	if out := reportOf(func(wk, up *result) {}); strings.Contains(out, "the restarted process's") {
		t.Errorf("a run without the split prints it:\n%s", out)
	}
}

// lineWith is the report's line holding s.
func lineWith(t *testing.T, out, s string) string {
	t.Helper()
	for line := range strings.Lines(out) {
		if strings.Contains(line, s) {
			return line
		}
	}
	t.Fatalf("the report lacks %q in\n%s", s, out)
	return ""
}

// getsIn is n GETs of resource, every one in the bucket up to le (of 0.05,
// 0.2, 0.4, 2 and +Inf).
func getsIn(resource string, n, le float64) scraped {
	s := scraped{}
	for _, b := range []float64{0.05, 0.2, 0.4, 2, math.Inf(1)} {
		c := n
		if b < le {
			c = 0
		}
		s[seriesID(requestDuration, map[string]string{"le": strconv.FormatFloat(b, 'g', -1, 64), "verb": "GET", "resource": resource, "subresource": "", "scope": "resource"})] = c
	}
	return s
}

// The restarted server's RBAC reads are a few calls, too few for the call
// table; the report shows them for the restart phase whatever their count.
func TestReportShowsTheRestartsRBACReads(t *testing.T) {
	cfg := config{nodes: 10, pods: 100, churnRate: 20}
	wk := fakeResult("watchkeeper", 0.2, 10*time.Millisecond, 50*time.Second, 700<<20, 0)
	up := fakeResult("upstream", 0.2, 20*time.Millisecond, 60*time.Second, 1000<<20, 0)
	restart := func(rbac scraped) scraped {
		s := getPods(0.2)
		maps.Copy(s, rbac)
		return s
	}
	// 12 on watchkeeper in (0.2, 0.4]: p99 0.2 + 0.2 x 0.99 = 398 ms; 10 on
	// stock in (0, 0.05]: 49.5 ms.
	withPhases(wk, getPods(0.2), nil, restart(getsIn("clusterroles", 12, 0.4)))
	withPhases(up, getPods(0.2), nil, restart(getsIn("clusterroles", 10, 0.05)))
	var b strings.Builder
	printReport(&b, cfg, wk, up)
	out := b.String()
	if n := strings.Count(out, "GET clusterroles resource"); n != 1 {
		t.Fatalf("the RBAC reads shown %d times, want once (the call table leaves out calls under 20):\n%s", n, out)
	}
	want := "RBAC calls in the restart phase, any count (the restarted server's bootstrap reads):\n" +
		"call                                             n wk  n stock    p99 wk p99 stock   ratio\n" +
		"GET clusterroles resource                          12       10   398.0ms    49.5ms   8.04x\n\n"
	if !strings.Contains(out, want) {
		t.Errorf("the report lacks %q:\n%s", want, out)
	}
}
