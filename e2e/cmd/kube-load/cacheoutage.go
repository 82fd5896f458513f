package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// watchkeeper's cache says when it goes out of service and what reads it
// sends to etcd meanwhile (the stock cache has no such series): a Get at
// resourceVersion "0" is the cache's to answer unless it is not ready, so
// a GET's p99 far over stock's points here first.
const (
	notReadyTotal       = "watchkeeper_watch_cache_not_ready_total"
	readsToStorageTotal = "watchkeeper_watch_cache_reads_to_storage_total"
)

// cacheOutage is one resource's transitions from ready to not ready, by
// reason, and the reads its cache sent to etcd because it was not ready,
// by verb, over a span of the run.
type cacheOutage struct {
	resource string
	notReady map[string]float64 // reason -> transitions
	reads    map[string]float64 // verb -> reads sent to etcd while not ready
}

// cacheOutages are the outages of inc, an increase of the scraped series,
// for the resources with any, by resource.
func cacheOutages(inc scraped) []cacheOutage {
	byResource := map[string]*cacheOutage{}
	of := func(l map[string]string) *cacheOutage {
		name := l["resource"]
		if g := l["group"]; g != "" {
			name += "." + g
		}
		o := byResource[name]
		if o == nil {
			o = &cacheOutage{resource: name, notReady: map[string]float64{}, reads: map[string]float64{}}
			byResource[name] = o
		}
		return o
	}
	for id, v := range inc {
		if v == 0 {
			continue
		}
		name, l := parseSeriesID(id)
		switch {
		case name == notReadyTotal:
			of(l).notReady[l["reason"]] += v
		case name == readsToStorageTotal && l["reason"] == "not_ready":
			of(l).reads[l["verb"]] += v
		}
	}
	out := make([]cacheOutage, 0, len(byResource))
	for _, o := range byResource {
		out = append(out, *o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].resource < out[j].resource })
	return out
}

func (o cacheOutage) String() string {
	return fmt.Sprintf("%s: not ready %s, %s reads to etcd meanwhile", o.resource, countsOf(o.notReady), countsOf(o.reads))
}

// countsOf is "total (key n, key n)" over the keys with any, sorted; "0"
// when none.
func countsOf(m map[string]float64) string {
	var total float64
	var parts []string
	for _, k := range sortedKeys(m) {
		total += m[k]
		parts = append(parts, fmt.Sprintf("%s %.0f", k, m[k]))
	}
	if total == 0 {
		return "0"
	}
	return fmt.Sprintf("%.0f (%s)", total, strings.Join(parts, ", "))
}

// readsToStorage is every read a cache sent to etcd over inc, by
// "verb/reason".
func readsToStorage(inc scraped) map[string]float64 {
	out := map[string]float64{}
	for id, v := range inc {
		if name, l := parseSeriesID(id); name == readsToStorageTotal && v != 0 {
			out[l["verb"]+"/"+l["reason"]] += v
		}
	}
	return out
}

// printCacheOutages prints, per cache and phase, the resources whose cache
// went not ready and the reads sent to etcd because of it; one line for a
// cache with none; then every read each cache sent to etcd over the run,
// by verb and reason.
func printCacheOutages(w io.Writer, wk, up *result) {
	fmt.Fprintf(w, "watch caches going not ready (%s, by reason) and the reads they sent to etcd meanwhile (%s{reason=\"not_ready\"}, by verb), by phase:\n",
		notReadyTotal, readsToStorageTotal)
	for _, r := range []*result{wk, up} {
		var phases [nAPIPhases][]cacheOutage
		some := false
		for p := range nAPIPhases {
			phases[p] = cacheOutages(r.byPhase[p])
			some = some || len(phases[p]) > 0
		}
		if !some {
			fmt.Fprintf(w, "  %-11s none\n", cacheLabel(r.cache))
			continue
		}
		for p := range nAPIPhases {
			line := "none"
			if len(phases[p]) > 0 {
				var parts []string
				for _, o := range phases[p] {
					parts = append(parts, o.String())
				}
				line = strings.Join(parts, "; ")
			}
			fmt.Fprintf(w, "  %-11s %-8s %s\n", cacheLabel(r.cache), apiPhase(p), line)
		}
	}
	for _, r := range []*result{wk, up} {
		fmt.Fprintf(w, "  %-11s every read sent to etcd over the run, by verb/reason: %s\n", cacheLabel(r.cache), countsOf(readsToStorage(r.acc)))
	}
	fmt.Fprintln(w)
}
