package main

import (
	"maps"
	"math"
	"testing"
	"time"

	"github.com/watchkeeper/watchkeeper/e2e/internal/kubecluster"
)

// buckets is a histogram's cumulative counts by upper bound, +Inf last.
func buckets(pairs ...float64) latency {
	l := latency{buckets: map[float64]float64{}}
	for i := 0; i+1 < len(pairs); i += 2 {
		l.buckets[pairs[i]] = pairs[i+1]
	}
	return l
}

func TestQuantileIsPrometheusHistogramQuantile(t *testing.T) {
	inf := math.Inf(1)
	for _, tc := range []struct {
		name string
		l    latency
		q    float64
		want time.Duration
	}{
		// 100 calls: 50 under 0.1s, 40 in (0.1, 0.2], 10 in (0.2, 0.4].
		// p50: rank 50 lands at the top of the first bucket.
		{"p50 at a bucket's top", buckets(0.1, 50, 0.2, 90, 0.4, 100, inf, 100), 0.5, 100 * time.Millisecond},
		// p75: rank 75, 25 of the second bucket's 40: 0.1 + 0.1*25/40.
		{"p75 linear in its bucket", buckets(0.1, 50, 0.2, 90, 0.4, 100, inf, 100), 0.75, 162500 * time.Microsecond},
		// p99: rank 99, 9 of the third bucket's 10: 0.2 + 0.2*9/10.
		{"p99", buckets(0.1, 50, 0.2, 90, 0.4, 100, inf, 100), 0.99, 380 * time.Millisecond},
		// The first bucket starts at 0: rank 5 of 10 in (0, 0.05].
		{"first bucket from zero", buckets(0.05, 10, 1, 10, inf, 10), 0.5, 25 * time.Millisecond},
		// Ranks in +Inf answer the highest finite bound, as Prometheus does.
		{"rank in +Inf", buckets(0.1, 50, 60, 98, inf, 100), 0.99, 60 * time.Second},
		{"no calls", buckets(0.1, 0, inf, 0), 0.99, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.l.quantile(tc.q); got != tc.want {
				t.Errorf("quantile(%v) = %v, want %v", tc.q, got, tc.want)
			}
		})
	}
}

func sample(name string, value float64, labels ...string) kubecluster.Sample {
	l := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		l[labels[i]] = labels[i+1]
	}
	return kubecluster.Sample{Name: name, Labels: l, Value: value}
}

func scrapeOf(samples ...kubecluster.Sample) scraped {
	s := scraped{}
	for _, x := range samples {
		s[seriesID(x.Name, x.Labels)] = x.Value
	}
	return s
}

func bucket(le string, v float64, verb, resource, subresource, scope, component string) kubecluster.Sample {
	return sample(requestDuration, v, "le", le, "verb", verb, "resource", resource, "subresource", subresource,
		"scope", scope, "component", component, "group", "", "version", "v1")
}

func TestAPILatenciesSumsTheRunsIncreaseByCall(t *testing.T) {
	start := scrapeOf(
		bucket("1", 10, "GET", "pods", "", "resource", "apiserver"),
		bucket("+Inf", 10, "GET", "pods", "", "resource", "apiserver"),
	)
	end := scrapeOf(
		bucket("1", 40, "GET", "pods", "", "resource", "apiserver"),
		bucket("+Inf", 50, "GET", "pods", "", "resource", "apiserver"),
		// Another component label, the same call: summed in.
		bucket("1", 5, "GET", "pods", "", "resource", ""),
		bucket("+Inf", 5, "GET", "pods", "", "resource", ""),
		// Long-running and streaming calls are not API call latency.
		bucket("+Inf", 7, "WATCH", "pods", "", "namespace", "apiserver"),
		bucket("+Inf", 7, "GET", "pods", "log", "resource", "apiserver"),
		bucket("+Inf", 3, "PATCH", "nodes", "status", "resource", "apiserver"),
	)
	acc := scraped{}
	acc.delta(start, end)
	got := apiLatencies(acc)
	if len(got) != 2 {
		t.Fatalf("calls %v, want GET pods and PATCH nodes/status", got)
	}
	get := got[apiCall{verb: "GET", resource: "pods", scope: "resource"}]
	if get.count() != 45 || get.buckets[1] != 35 {
		t.Errorf("GET pods: %v calls, %v under 1s; want 45 (40 + 5), 35", get.count(), get.buckets[1])
	}
	if n := got[apiCall{verb: "PATCH", resource: "nodes", subresource: "status", scope: "resource"}].count(); n != 3 {
		t.Errorf("PATCH nodes/status: %v calls, want 3", n)
	}
}

func TestDeltaAcrossARestartCountsTheNewProcessFromZero(t *testing.T) {
	id := seriesID("apiserver_request_total", map[string]string{"verb": "LIST"})
	acc := scraped{}
	acc.delta(scraped{id: 100}, scraped{id: 130}) // before the restart
	acc.delta(scraped{id: 130}, scraped{id: 12})  // the new process counts from 0
	if acc[id] != 42 {
		t.Errorf("increase %v, want 30 + 12", acc[id])
	}
	if n := acc.sumOf("apiserver_request_total", map[string]string{"verb": "LIST"}); n != 42 {
		t.Errorf("sumOf = %v, want 42", n)
	}
	if n := acc.sumOf("apiserver_request_total", map[string]string{"verb": "GET"}); n != 0 {
		t.Errorf("sumOf GET = %v, want 0", n)
	}
}

func TestThresholdsAreTheSLOs(t *testing.T) {
	for _, tc := range []struct {
		c    apiCall
		want time.Duration
	}{
		{apiCall{verb: "GET", resource: "nodes", scope: "resource"}, time.Second},
		{apiCall{verb: "POST", resource: "pods", scope: "resource"}, time.Second},
		{apiCall{verb: "PATCH", resource: "nodes", subresource: "status", scope: "resource"}, time.Second},
		{apiCall{verb: "LIST", resource: "pods", scope: "namespace"}, 5 * time.Second},
		{apiCall{verb: "LIST", resource: "pods", scope: "cluster"}, 30 * time.Second},
	} {
		if got := tc.c.threshold(); got != tc.want {
			t.Errorf("%v: threshold %v, want %v", tc.c, got, tc.want)
		}
	}
}

// leases is a scrape of PUT leases' histogram: cumulative counts at
// le 0.1, 1, 5 and +Inf.
func leases(c01, c1, c5, inf float64) scraped {
	call := func(le string, v float64) kubecluster.Sample {
		return bucket(le, v, "PUT", "leases", "", "resource", "apiserver")
	}
	return scrapeOf(call("0.1", c01), call("1", c1), call("5", c5), call("+Inf", inf))
}

func TestPhasesDifferenceTheScrapesAcrossTheRestart(t *testing.T) {
	put := apiCall{verb: "PUT", resource: "leases", scope: "resource"}
	t0 := time.Unix(1000, 0)
	// The old process has served 110 calls before the run.
	p := newPhased(t0, leases(100, 110, 110, 110))
	// Steady: 200 calls under 0.1s.
	p.mark(t0.Add(60*time.Second), leases(300, 310, 310, 310), apiSteady)
	// The storm: 50 under 0.1s, 50 in (1, 5].
	p.mark(t0.Add(64*time.Second), leases(350, 360, 410, 410), apiStorm)
	// Steady again: 100 under 0.1s, up to the scrape before the SIGTERM.
	p.mark(t0.Add(120*time.Second), leases(450, 460, 510, 510), apiSteady)
	p.replaced()
	// The new process counts from zero: by 30s after ready it served 100
	// calls under 0.1s and 500 in (0.1, 1]. Its buckets from 1s up are
	// past the old process's last values, the one under 0.1s is not: a
	// reset told only by counters going backwards gets both wrong.
	p.mark(t0.Add(170*time.Second), leases(100, 600, 600, 600), apiRestart)
	// Steady to the end: 300 under 0.1s.
	p.mark(t0.Add(180*time.Second), leases(400, 900, 900, 900), apiSteady)

	for _, tc := range []struct {
		ph   apiPhase
		want latency
		took time.Duration
		p99  time.Duration
	}{
		// 600 calls under 0.1s: rank 594, 0.1 * 594/600.
		{apiSteady, buckets(0.1, 600, 1, 600, 5, 600, math.Inf(1), 600), 126 * time.Second, 99 * time.Millisecond},
		// Rank 99 is the 49th of 50 in (1, 5]: 1 + 4*49/50.
		{apiStorm, buckets(0.1, 50, 1, 50, 5, 100, math.Inf(1), 100), 4 * time.Second, 4920 * time.Millisecond},
		// Rank 594 is the 494th of 500 in (0.1, 1]: 0.1 + 0.9*494/500.
		{apiRestart, buckets(0.1, 100, 1, 600, 5, 600, math.Inf(1), 600), 50 * time.Second, 989200 * time.Microsecond},
	} {
		got := apiLatencies(p.inc[tc.ph])[put]
		if !maps.Equal(got.buckets, tc.want.buckets) {
			t.Errorf("%s: buckets %v, want %v", tc.ph, got.buckets, tc.want.buckets)
		}
		if q := got.quantile(0.99); (q - tc.p99).Abs() > time.Microsecond {
			t.Errorf("%s: p99 %v, want %v", tc.ph, q, tc.p99)
		}
		if p.took[tc.ph] != tc.took {
			t.Errorf("%s: lasted %v, want %v", tc.ph, p.took[tc.ph], tc.took)
		}
	}
	// The phases add up to the whole run, as one difference per process
	// (the old process's first and last scrape, the new one's last) has it.
	whole := scraped{}
	whole.delta(leases(100, 110, 110, 110), leases(450, 460, 510, 510))
	whole.delta(nil, leases(400, 900, 900, 900))
	if got := apiLatencies(p.total())[put]; !maps.Equal(got.buckets, apiLatencies(whole)[put].buckets) {
		t.Errorf("the phases' sum %v, want the whole run's %v", got.buckets, apiLatencies(whole)[put].buckets)
	}
}

// The scrape keeps watchkeeper's readiness series: the report's outage
// lines read them.
func TestScrapeKeepsTheCachesReadinessSeries(t *testing.T) {
	body := `# HELP watchkeeper_watch_cache_not_ready_total x
watchkeeper_watch_cache_not_ready_total{group="",reason="storage_silent",resource="nodes"} 2
watchkeeper_watch_cache_reads_to_storage_total{group="",reason="not_ready",resource="nodes",verb="get"} 118
watchkeeper_watch_cache_history_events{group="",resource="nodes"} 7
`
	got := map[string]float64{}
	for _, x := range kubecluster.ParseMetrics(body, scrapePrefixes...) {
		got[x.Name] += x.Value
	}
	want := map[string]float64{notReadyTotal: 2, readsToStorageTotal: 118}
	if !maps.Equal(got, want) {
		t.Errorf("scraped %v, want %v", got, want)
	}
}
