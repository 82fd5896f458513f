package main

import (
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
)

type reportHeader struct {
	mode, command string
	took          time.Duration
	// skipped are scenario/level pairs selected but not run in this mode.
	skipped []string
	// charts are the paths of the charts drawn, linked at the end.
	charts []string
	// heapProfiles are the paths of the heap profiles the runs wrote.
	heapProfiles []string
}

// row is one figure of one scenario size, with each decorator's value.
type row struct {
	scenario, level, params, metric, unit, better string
	values                                        map[string]float64
}

// markdownReport renders the comparison table, the baselines and what could
// not be measured.
func markdownReport(h reportHeader, results []result.Result, failures []failure) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# watchkeeper vs upstream cacher\n\n")
	fmt.Fprintf(&b, "`%s` (%s mode), %s, %s %s/%s, %d CPUs, %v in all.\n\n",
		h.command, h.mode, time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.Version(),
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), h.took.Round(time.Second))
	b.WriteString(methodNote)

	main, baselines := tableRows(results)
	b.WriteString("\n| scenario | level | params | metric | upstream | watchkeeper | ratio watchkeeper/upstream | better |\n")
	b.WriteString("|---|---|---|---|---:|---:|---:|---|\n")
	for _, r := range main {
		up, hasUp := r.values[decUpstream]
		wk, hasWK := r.values[decWatchkeeper]
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n",
			r.scenario, r.level, r.params, metricLabel(r.metric, r.unit),
			valueOrDash(up, hasUp), valueOrDash(wk, hasWK), ratio(up, hasUp, wk, hasWK), dashIfEmpty(r.better))
	}
	b.WriteString(targetsTable(targetRows(results)))
	b.WriteString(floorTable(results))
	if len(baselines) > 0 {
		b.WriteString("\nBaseline `none`, no cache (idle: a consumer goroutine ranging over a bare unbuffered channel, which the `_net` figures above " +
			"subtract; exactkey: one etcd3 watch of the prefix and a map from key to the watches' channels, the floor table above; " +
			"memory: the raw etcd3 storage, whose heap the `_net` figures subtract, and whose start is one list of every object from etcd):\n\n")
		b.WriteString("| scenario | level | params | metric | none |\n|---|---|---|---|---:|\n")
		for _, r := range baselines {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", r.scenario, r.level, r.params,
				metricLabel(r.metric, r.unit), formatValue(r.values[decNone]))
		}
	}
	if vs := variantRows(main); len(vs) > 0 {
		b.WriteString("\nVariants of watchkeeper some scenarios also run (restart: watchkeeper-nobackfill, without the history " +
			"backfill after each list; budget: watchkeeper-budget, over a memory budget; memory: watchkeeper-unshared, each object its own copy; memory, list, fanout: watchkeeper-compact, objects held serialized), beside upstream's figure of the same run:\n\n")
		b.WriteString("| scenario | level | params | metric | variant | value | upstream | ratio variant/upstream |\n|---|---|---|---|---|---:|---:|---:|\n")
		for _, v := range vs {
			up, hasUp := v.row.values[decUpstream]
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", v.row.scenario, v.row.level, v.row.params,
				metricLabel(v.row.metric, v.row.unit), v.decorator, formatValue(v.value), valueOrDash(up, hasUp), ratio(up, hasUp, v.value, true))
		}
	}
	for _, sk := range h.skipped {
		fmt.Fprintf(&b, "\nNot run in %s mode: `%s`.\n", h.mode, sk)
	}
	if len(failures) > 0 {
		b.WriteString("\nNot measured, or measured only in part (the rows above hold whatever these runs printed):\n\n")
		for _, f := range failures {
			fmt.Fprintf(&b, "- `%s`: %v\n", f.spec, f.err)
		}
	}
	if len(h.heapProfiles) > 0 {
		b.WriteString("\nHeap profiles of the memory scenario after the updates (`go tool pprof -top -sample_index=inuse_space FILE`):")
		for _, p := range h.heapProfiles {
			name := filepath.Base(p)
			fmt.Fprintf(&b, " [%s](%s)", name, name)
		}
		b.WriteString("\n")
	}
	if len(h.charts) > 0 {
		b.WriteString("\n")
		for _, c := range h.charts {
			name := filepath.Base(c)
			fmt.Fprintf(&b, "![%s](%s)\n", strings.TrimSuffix(name, filepath.Ext(name)), name)
		}
	}
	return b.String()
}

const methodNote = `Each (scenario, decorator, size) ran in a fresh process against one etcd in a
process of its own (progress notifications every 1s, no fsync), each under its own
etcd key prefix; CPU is the child's getrusage, memory is HeapAlloc+StackInuse after
two GCs. Resource: example.Pod, protobuf, with the pods registry's nodeName trigger and
indexer. Both caches at their defaults (k8s.io/apiserver v0.38.0-beta.0 feature gates,
watchkeeper options.NewWatchCacheOptions()). Bookmarks: every watch's deadline is one
period plus 2s after the start, so both caches owe each watch one pre-deadline
bookmark at the end of the period (upstream's periodic bookmark is a fixed 1m), while a
key outside the resource is written every second. exactkey and storm (issue 13) write
through a raw etcd3 storage, so each cache learns of a write only from its own watch:
exactkey's writes come from a writer process of their own, and its CPU per write is the
child's CPU from the first write until every exact-key watcher has its events, the median
of five rounds of the writes over the same watchers. Between those rounds come five of the
same writes to 1,000 more objects no watcher watches (cpu_ms_per_write_unwatched); the
difference of the two medians over the deliveries per write is cpu_us_per_delivery (from
one delivery a write). allocs_per_write and allocs_per_write_unwatched count the heap
objects the child allocated over the same spans (MemStats.Mallocs, what go test's
allocs/op counts), per write, the median of the watched and of the unwatched rounds.
storm's lag is, per write, its scheduled time (open-loop pacing) until an
always-open plain watch of the cache has the event. Rows of level http come from
package httpbench: the sample apiserver over HTTP/2, measured as its doc describes.
Rows with pairs=N ran N times with each cache, which went first alternating: each figure
is the median of its N values (results.jsonl has every one).
memory (issue 29.2) writes N objects straight to etcd, the small pods of the other
scenarios or core/v1 pods of 2-4 KB with containers, env and volume mounts (object_bytes
is their mean protobuf size), then starts the cache over them: start_to_ready is from
building the storage until ReadinessCheck passes (the initial list). Its heap per object is
HeapAlloc after two GCs over N, once the cache is ready (filled) and again once every object
was updated once more and the cache has applied it (updated: the history and snapshots
full); _net subtracts the none run of the same size. The heap_after_updates_<holder> rows
split that heap by the stack that allocated it, from the runtime's heap profile (one sample
per 64 KiB, scaled as pprof does): decoded objects, selector attributes, key index, ordered
index (the B-tree's bytes after the fill: an update keeps its shape), snapshot nodes (the
B-tree's bytes beyond those, which clones keep, and the snapshots' records), history
entries, other. decoded_versions_held is the decoded objects' bytes after the updates over
those after the fill: 2 when each object's version before its update is held as well.
sharded (gate ShardedListAndWatch) opens N watches of the whole resource, watch i with the
shard selector shardRange(object.metadata.uid, START, END) of the i-th of N equal ranges of
the 64-bit hash space (as N kube-state-metrics shards ask), then a writer process creates E
objects with random UUID UIDs; each object is owed to the one watch whose range holds FNV-1a
64 of its UID, computed by the benchmark on its own. events_wrong_shard counts events a watch
got from outside its range (a failure), watchers_exact the watches that got exactly their
shard; cpu_seconds is the child's CPU from the first write until the last owed event came.
prevkv runs each cache with the gate WatchFromStorageWithoutPrevKV on and off (the
gate_without_prevkv param, each in a process of its own): with the cache watching, N core/v1
pods of 2-4 KB are created, updated once and deleted straight in etcd, each phase until a watch
of the cache has its last event. etcd_mvcc_ranges is the delta of etcd's etcd_mvcc_range_total
(with PrevKV, etcd ranges its store for each update and delete it sends the watch),
etcd_range_rpcs its Range requests, etcd_grpc_sent_bytes the gRPC message bytes it sent every
client (the writes' answers too); cache_received_bytes are the bytes the cache's etcd clients
received on the wire, counted by a TCP proxy only the cache's storage goes through.
slowtax (upstream's BenchmarkSlowWatcherTax) opens N fast watches that always read, then
writes E pods at the rate's pace in each of three phases: baseline (the fast ones alone),
stalled (plus slow watches that never read, opened at the phase's start) and reconnecting
(the slow ones replaced by new ones every 500ms, as clients whose watch was closed come
back). For each phase: the fast watches' write-to-receipt latency and throughput, the
events they missed, and the slow watches the cache closed (watchkeeper stalls them instead:
--watch-cache-stall-slow-watchers); stalled_p99_tax is the stalled phase's p99 over the
baseline's.
budget writes N realistic pods and starts each storage over them: none (no cache), both
caches, and watchkeeper-budget, watchkeeper with --watch-cache-max-bytes a quarter of the
pods' bytes, measured once it is over its budget and serving from etcd. Then the heap per
pod with one watch open, a first page of 500 and a whole list at RV "0", a get at RV "0",
and how long the open watch takes to get an update of a tenth of the pods.
`

// tableRows groups results into rows in the order the runs produced them;
// rows of the none baseline go in their own list.
func tableRows(results []result.Result) (main, baselines []*row) {
	index := map[string]*row{}
	for _, r := range results {
		params := formatParams(r.Params)
		key := strings.Join([]string{r.Scenario, r.Level, params, r.Metric}, "|")
		x, ok := index[key]
		if !ok {
			x = &row{scenario: r.Scenario, level: r.Level, params: params, metric: r.Metric,
				unit: r.Unit, better: r.Better, values: map[string]float64{}}
			index[key] = x
		}
		x.values[r.Decorator] = r.Value
	}
	seen := map[*row]bool{}
	for _, r := range results {
		x := index[strings.Join([]string{r.Scenario, r.Level, formatParams(r.Params), r.Metric}, "|")]
		if seen[x] {
			continue
		}
		if r.Decorator == decNone {
			// Placed when a decorator's figure comes along; a row only the
			// baseline has goes to the baseline table alone.
			continue
		}
		seen[x] = true
		main = append(main, x)
	}
	for _, r := range results {
		if r.Decorator == decNone {
			x := index[strings.Join([]string{r.Scenario, r.Level, formatParams(r.Params), r.Metric}, "|")]
			baselines = append(baselines, &row{scenario: x.scenario, level: x.level, params: x.params,
				metric: x.metric, unit: x.unit, values: map[string]float64{decNone: r.Value}})
		}
	}
	return main, baselines
}

// paramOrder puts the sizes people read first first.
var paramOrder = []string{"watchers", "events", "objects", "repeats", "period_seconds"}

func formatParams(p map[string]int) string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		ri, rj := rank(keys[i]), rank(keys[j])
		if ri != rj {
			return ri < rj
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, p[k])
	}
	return strings.Join(parts, " ")
}

func rank(k string) int {
	if i := slices.Index(paramOrder, k); i >= 0 {
		return i
	}
	return len(paramOrder)
}

func metricLabel(metric, unit string) string {
	if unit == "" {
		return metric
	}
	return fmt.Sprintf("%s [%s]", metric, unit)
}

func valueOrDash(v float64, ok bool) string {
	if !ok {
		return "not measured"
	}
	return formatValue(v)
}

// formatValue keeps about three significant digits without exponents.
func formatValue(v float64) string {
	a := math.Abs(v)
	switch {
	case a == 0:
		return "0"
	case a >= 100:
		return addThousands(fmt.Sprintf("%.0f", v))
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

func addThousands(s string) string {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

func ratio(up float64, hasUp bool, wk float64, hasWK bool) string {
	switch {
	case !hasUp || !hasWK:
		return "-"
	case up == 0 && wk == 0:
		return "="
	case up == 0:
		return "n/a (upstream 0)"
	}
	return fmt.Sprintf("%.3g", wk/up)
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// variant is one figure of a decorator other than the pair and the
// baseline, on its row.
type variant struct {
	row       *row
	decorator string
	value     float64
}

// variantRows are the figures of the variants, row by row, variants sorted.
func variantRows(main []*row) []variant {
	var out []variant
	for _, r := range main {
		var decs []string
		for d := range r.values {
			if d != decUpstream && d != decWatchkeeper && d != decNone {
				decs = append(decs, d)
			}
		}
		sort.Strings(decs)
		for _, d := range decs {
			out = append(out, variant{row: r, decorator: d, value: r.values[d]})
		}
	}
	return out
}
