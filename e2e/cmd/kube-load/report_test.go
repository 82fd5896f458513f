package main

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeResult is a run's result with the figures the targets judge.
func fakeResult(cache string, le float64, watchLatency time.Duration, cpu time.Duration, rss int64, relists int64) *result {
	st := &stats{}
	r := &result{cache: cache, st: st, tracker: newPodTracker(st), measured: time.Minute, cpu: cpu, peakRSS: rss, consistent: true}
	r.acc = scraped{}
	// 200 GETs of pods: 190 under 0.05s, 10 in (0.05, le]: p99, rank 198,
	// is 8/10 into the second bucket.
	for _, b := range []struct {
		le string
		n  float64
	}{{"0.05", 190}, {strconv.FormatFloat(le, 'g', -1, 64), 200}, {"+Inf", 200}} {
		r.acc[seriesID(requestDuration, map[string]string{"le": b.le, "verb": "GET", "resource": "pods", "subresource": "", "scope": "resource"})] = b.n
	}
	for range 100 {
		st.podLatency.Record(watchLatency)
	}
	st.c[classPods][phaseSteady].relists.Add(relists)
	return r
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
	if got := len(verdicts(b.String())); got != 8 {
		t.Errorf("%d targets judged, want 8:\n%s", got, b.String())
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
		"watch event latency p99 <= 0.8x",
		"kube-apiserver peak RSS <= 0.8x",
		"kube-apiserver CPU <= 0.9x",
		"0 relists or 410s outside the restart",
	} {
		if v[name] != "MISSED" {
			t.Errorf("%q: %q, want MISSED\n%s", name, v[name], b.String())
		}
	}
	if !strings.Contains(b.String(), "GET pods resource on watchkeeper: p99 1610.0ms > 1s") {
		t.Errorf("the SLO miss does not name the call and cache:\n%s", b.String())
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
