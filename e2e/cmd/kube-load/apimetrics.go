package main

import (
	"context"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/watchkeeper/watchkeeper/e2e/internal/kubecluster"
)

// API call latency as SIG Scalability's API responsiveness measurement
// (clusterloader2's APIResponsivenessPrometheus, its simple query for runs
// shorter than its 5m windows) computes it: the increase of
// apiserver_request_duration_seconds over the run, summed by resource,
// subresource, verb and scope, without watches and without the streaming
// subresources (log, exec, portforward, attach, proxy); quantiles as
// Prometheus' histogram_quantile (linear within a bucket). The SLO
// (sig-scalability/slos/api_call_latency.md): p99 <= 1s for single-object
// calls (scope resource: GET and every mutating call on one object), <= 5s
// for calls of scope namespace, <= 30s for scope cluster.
const requestDuration = "apiserver_request_duration_seconds_bucket"

// scraped are the series of one /metrics scrape the run needs, by identity
// (name and labels).
type scraped map[string]float64

var scrapePrefixes = []string{
	requestDuration,
	apfWait,
	etcdRequest,
	cacheReadWait,
	progressAnswer,
	filterLatency,
	gcCycles,
	gcPauses,
	schedLatency,
	"apiserver_request_total",
	"apiserver_watch_list_duration_seconds_count",
	"apiserver_terminated_watchers_total",
	"watchkeeper_watch_cache_dropped_total",
	notReadyTotal,
	readsToStorageTotal,
}

func scrape(ctx context.Context, s *kubecluster.Server) (scraped, error) {
	samples, err := s.Metrics(ctx, scrapePrefixes...)
	if err != nil {
		return nil, err
	}
	out := scraped{}
	for _, x := range samples {
		out[seriesID(x.Name, x.Labels)] = x.Value
	}
	return out, nil
}

func seriesID(name string, labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(name)
	for _, k := range keys {
		b.WriteString("|" + k + "=" + labels[k])
	}
	return b.String()
}

func parseSeriesID(id string) (string, map[string]string) {
	parts := strings.Split(id, "|")
	labels := map[string]string{}
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(p, "=")
		labels[k] = v
	}
	return parts[0], labels
}

// delta adds end-start of every series to acc (a counter that went
// backwards is a restarted process: end counts from zero).
func (acc scraped) delta(start, end scraped) {
	for id, e := range end {
		d := e - start[id]
		if d < 0 {
			d = e
		}
		acc[id] += d
	}
}

// apiCall is one row of the measurement.
type apiCall struct {
	verb, resource, subresource, scope string
}

func (c apiCall) String() string {
	if c.resource == "" { // a non-resource URL: subresource holds its path
		return c.verb + " " + c.subresource
	}
	r := c.resource
	if c.subresource != "" {
		r += "/" + c.subresource
	}
	return c.verb + " " + r + " " + c.scope
}

// threshold is the SLO of the call.
func (c apiCall) threshold() time.Duration {
	switch c.scope {
	case "resource":
		return time.Second
	case "namespace":
		return 5 * time.Second
	default:
		return 30 * time.Second
	}
}

// latency is an apiCall's histogram over the run.
type latency struct {
	buckets map[float64]float64 // le -> cumulative count
}

func (l latency) count() float64 { return l.buckets[math.Inf(1)] }

// quantile is Prometheus' histogram_quantile.
func (l latency) quantile(q float64) time.Duration {
	les := make([]float64, 0, len(l.buckets))
	for le := range l.buckets {
		les = append(les, le)
	}
	slices.Sort(les)
	total := l.count()
	if total == 0 || len(les) < 2 {
		return 0
	}
	rank := q * total
	prevLE, prevCount := 0.0, 0.0
	for _, le := range les {
		c := l.buckets[le]
		if c >= rank {
			if math.IsInf(le, 1) {
				return seconds(prevLE) // the highest finite bucket
			}
			if c == prevCount {
				return seconds(le)
			}
			return seconds(prevLE + (le-prevLE)*(rank-prevCount)/(c-prevCount))
		}
		prevLE, prevCount = le, c
	}
	return seconds(prevLE)
}

// apfWait is API Priority and Fairness' queue wait, which
// apiserver_request_duration_seconds includes: a cheap call queued behind
// slow ones of its priority level is slow by their doing.
const apfWait = "apiserver_flowcontrol_request_wait_duration_seconds_bucket"

// apfWaits groups the increase of the queue wait of the requests that
// executed by priority level.
func apfWaits(acc scraped) map[string]latency {
	return bucketsBy(acc, apfWait, func(l map[string]string) (string, bool) {
		return l["priority_level"], l["execute"] == "true"
	})
}

// etcdRequest is kube-apiserver's latency of its requests to etcd, by
// operation (get, list, create, update, delete, ...) and resource.
const etcdRequest = "etcd_request_duration_seconds_bucket"

// etcdLatencies groups the increase of the etcd request latency by
// operation.
func etcdLatencies(acc scraped) map[string]latency {
	return bucketsBy(acc, etcdRequest, func(l map[string]string) (string, bool) {
		return l["operation"], true
	})
}

// cacheReadWait is how long reads and watches waited for the watch cache
// to reach the revision they need (a consistent read's, a WatchList's):
// both caches observe a wait only, and hold the request's API Priority and
// Fairness seat meanwhile.
const cacheReadWait = "apiserver_watch_cache_read_wait_seconds_bucket"

// cacheReadWaits groups the increase of the watch caches' read wait by
// resource.
func cacheReadWaits(acc scraped) map[string]latency {
	return bucketsBy(acc, cacheReadWait, func(l map[string]string) (string, bool) {
		return groupResource(l), true
	})
}

// progressAnswer is how long each of watchkeeper's caches waited for
// etcd's answer to its progress requests, from the oldest unanswered one:
// the part of a read wait that is etcd's answer on the cache's own stream
// (stock's caches share one stream and have no such series).
const progressAnswer = "watchkeeper_watch_cache_progress_request_answer_seconds_bucket"

// progressAnswers groups the increase of the answer time by resource.
func progressAnswers(acc scraped) map[string]latency {
	return bucketsBy(acc, progressAnswer, func(l map[string]string) (string, bool) {
		return groupResource(l), true
	})
}

// filterLatency is the time a request spends in each of kube-apiserver's
// filters before its handler (authentication, audit, impersonation,
// priority and fairness, authorization), every request summed: a call
// whose handler was fast (no trace logged) was slow here or in its
// response.
const filterLatency = "apiserver_request_filter_duration_seconds_bucket"

// filterLatencies groups the increase of the filters' latency by filter.
func filterLatencies(acc scraped) map[string]latency {
	return bucketsBy(acc, filterLatency, func(l map[string]string) (string, bool) {
		return l["filter"], true
	})
}

// gcCycles and gcPauses count kube-apiserver's garbage collections and sum
// their stop-the-world pauses: on two cores each cycle's mark work takes
// CPU from the requests while it runs, so a cache whose smaller heap were
// collected more often would show its stalls here (bf15 counted 7-8
// against 6-7 a steady minute: it is not that).
const (
	gcCycles = "go_gc_duration_seconds_count"
	gcPauses = "go_gc_duration_seconds_sum"
)

// schedLatency is how long kube-apiserver's goroutines waited to run once
// runnable: a median that is low with a long tail is stalls (the
// collector, a lock), not work.
const schedLatency = "go_sched_latencies_seconds_bucket"

// schedLatencies is the increase of the scheduling latency, as one group.
func schedLatencies(acc scraped) map[string]latency {
	return bucketsBy(acc, schedLatency, func(map[string]string) (string, bool) { return "goroutines", true })
}

// groupResource is a series' resource, with its group if it has one.
func groupResource(l map[string]string) string {
	if g := l["group"]; g != "" {
		return l["resource"] + "." + g
	}
	return l["resource"]
}

// bucketsBy groups the increase of histogram name's bucket series into a
// latency per key; a series whose labels key refuses is left out.
func bucketsBy[K comparable](acc scraped, name string, key func(labels map[string]string) (K, bool)) map[K]latency {
	out := map[K]latency{}
	for id, v := range acc {
		n, l := parseSeriesID(id)
		if n != name {
			continue
		}
		k, ok := key(l)
		if !ok {
			continue
		}
		le, err := strconv.ParseFloat(l["le"], 64)
		if err != nil {
			continue
		}
		if out[k].buckets == nil {
			out[k] = latency{buckets: map[float64]float64{}}
		}
		out[k].buckets[le] += v
	}
	return out
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

var (
	longRunning  = map[string]bool{"WATCH": true, "WATCHLIST": true, "CONNECT": true, "PROXY": true}
	streamingSub = map[string]bool{"log": true, "exec": true, "portforward": true, "attach": true, "proxy": true}
)

// apiLatencies groups the run's request-duration increase by call.
func apiLatencies(acc scraped) map[apiCall]latency {
	return bucketsBy(acc, requestDuration, func(l map[string]string) (apiCall, bool) {
		c := apiCall{verb: l["verb"], resource: l["resource"], subresource: l["subresource"], scope: l["scope"]}
		return c, !longRunning[c.verb] && !streamingSub[c.subresource]
	})
}

// sumOf adds the increase of the series of name whose labels have the
// given values.
func (acc scraped) sumOf(name string, match map[string]string) float64 {
	var n float64
	for id, v := range acc {
		nm, l := parseSeriesID(id)
		if nm != name {
			continue
		}
		ok := true
		for k, want := range match {
			if l[k] != want {
				ok = false
				break
			}
		}
		if ok {
			n += v
		}
	}
	return n
}

// apiPhase is the part of the measured run an increase of the scraped
// series is counted in, so that a p99 can be placed in time.
type apiPhase int

const (
	apiSteady  apiPhase = iota // the churn alone: every span outside the storm and the restart, summed
	apiStorm                   // from the start storm until the restart's SIGTERM (or the run's end)
	apiRestart                 // from the last scrape before kube-apiserver's SIGTERM until 30s after it is ready again
	nAPIPhases
)

var apiPhaseNames = [nAPIPhases]string{"steady", "storm", "restart"}

func (p apiPhase) String() string { return apiPhaseNames[p] }

// phased differences the run's scrapes, taken at its phase boundaries in
// order, into the increase of every series per phase. Each scrape closes
// the span since the previous one and names that span's phase.
type phased struct {
	last   scraped // the previous scrape; nil once its process was replaced
	lastAt time.Time
	inc    [nAPIPhases]scraped
	took   [nAPIPhases]time.Duration
}

// newPhased starts at the scrape that opens the measured run.
func newPhased(at time.Time, s scraped) *phased {
	p := &phased{last: s, lastAt: at}
	for i := range p.inc {
		p.inc[i] = scraped{}
	}
	return p
}

// mark adds the increase from the previous scrape to s to phase ph.
func (p *phased) mark(at time.Time, s scraped, ph apiPhase) {
	p.inc[ph].delta(p.last, s)
	p.took[ph] += at.Sub(p.lastAt)
	p.last, p.lastAt = s, at
}

// replaced says kube-apiserver was restarted after the previous scrape:
// the next scrape is the new process's, whose counters start from zero,
// so all of it is the increase (what the old process served after its
// last scrape is lost with it). delta's own guard, a counter gone
// backwards, would miss every series the new process has already counted
// past the old one's value.
func (p *phased) replaced() { p.last = nil }

// total is the increase over the whole measured run.
func (p *phased) total() scraped {
	acc := scraped{}
	for _, inc := range p.inc {
		for id, v := range inc {
			acc[id] += v
		}
	}
	return acc
}
