package main

import (
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
