package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apiserver/pkg/features"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/storagebench"
)

// Scenario and level names, as in result.Result.
var (
	allScenarios = []string{"idle", "bookmarks", "fanout", "list", "watchlist", "exactkey", "storm", "memory", "sharded", "prevkv", "slowtax", "restart", "budget"}
	allLevels    = []string{"storage", "http"}
	// withBaseline are the storage-level scenarios that also run the
	// baseline none, no cache.
	withBaseline = []string{"idle", "exactkey", "memory", "budget", "restart"}
	// httpScenarios are the ones package httpbench provides.
	httpScenarios = []string{"idle", "bookmarks", "fanout"}
)

// maxCustomResources is the most custom resources the memory scenario
// holds in one run.
const maxCustomResources = 10_000

const (
	decUpstream    = "upstream"
	decWatchkeeper = "watchkeeper"
	decNone        = "none"
)

// runSpec is one child run: a scenario at one level, with one decorator, at
// one size.
type runSpec struct {
	Scenario, Level, Decorator string
	Watchers, Events           int
	Objects, Repeats           int
	// Rate is writes per second (storm).
	Rate int
	// Kind is the kind of object (memory: storagebench.MemoryKinds).
	Kind string
	// FeatureGates are set in the child's process-wide feature gate before
	// the scenario starts, as --feature-gates takes them
	// ("WatchFromStorageWithoutPrevKV=false"); "" keeps the defaults.
	FeatureGates string
	Period       time.Duration
	// Timeout is the child's own deadline; the parent allows a margin more.
	Timeout time.Duration
	// Pairs is how many times this size runs with both caches, Pair which
	// of those times this run is (from 0); the report takes the median
	// (medianOfPairs).
	Pairs, Pair int
}

func (r runSpec) String() string {
	s := fmt.Sprintf("%s/%s/%s", r.Scenario, r.Level, r.Decorator)
	for _, p := range []struct {
		name string
		v    int
	}{{"w", r.Watchers}, {"e", r.Events}, {"o", r.Objects}, {"r", r.Rate}} {
		if p.v > 0 {
			s += "-" + p.name + strconv.Itoa(p.v)
		}
	}
	if r.Kind != "" {
		s += "-" + r.Kind
	}
	if r.FeatureGates != "" {
		s += "-" + strings.NewReplacer("=", "-", ",", "-").Replace(r.FeatureGates)
	}
	if r.Pairs > 1 {
		s += "-p" + strconv.Itoa(r.Pair+1)
	}
	return s
}

// sizes are the scenario sizes of one mode.
type sizes struct {
	idleWatchers     []int
	bookmarkWatchers []int
	bookmarkPeriod   time.Duration
	fanOutWatchers   []int
	fanOutEvents     int
	listObjects      int
	listRepeats      int
	// listExactAge is how old the exact-RV list's RV is (a write a second).
	listExactAge     time.Duration
	watchListObjects int
	watchListRepeats int
	// exactkey (issue 13.1): exact-key watchers over exactKeyObjects,
	// exactKeyWrites writes to random ones.
	exactKeyWatchers []int
	exactKeyObjects  int
	exactKeyWrites   int
	// exactKeyPairs and httpFanOutPairs are how many pairs of runs those
	// sizes get: their figures (CPU per write over a few seconds; the
	// events/s and p99 of one HTTP fan-out) move by a fifth from one pair
	// to the next, more than the differences they judge.
	exactKeyPairs, httpFanOutPairs int
	// storm (issue 13.2): stormPods over stormNodes nodes, one WatchList
	// per node, writes at stormRate per second.
	stormPods, stormNodes, stormRate int
	// memory (issue 29.2): objects of each kind, cached; the heap profile
	// is taken at the largest.
	memoryObjects []int
	// sharded: shardedWatchers watches of the whole resource, each of its
	// own equal range of the UID hash space, shardedEvents creates.
	shardedWatchers []int
	shardedEvents   int
	// prevkv: prevKVObjects realistic pods created, updated and deleted
	// with the cache watching, with WatchFromStorageWithoutPrevKV on and
	// off.
	prevKVObjects int
	// slowtax (issue 50.1, upstream's BenchmarkSlowWatcherTax):
	// slowTaxWatchers fast watchers beside slowTaxSlow that never read,
	// slowTaxEvents writes at slowTaxRate a second in each of its three
	// phases (more than a watcher's queue bound, so watchkeeper's slow
	// watchers stall).
	slowTaxWatchers, slowTaxSlow, slowTaxEvents, slowTaxRate int
	// restart (issue 50.4): restartResources caches of restartObjects
	// pods each start at once over restartEvents updates of history.
	restartResources, restartObjects, restartEvents int
	// budget (issue 50.2): budgetObjects realistic pods, the budget a
	// quarter of their bytes.
	budgetObjects int

	httpIdleWatchers  []int
	httpBookmarkWatch []int
	// httpBookmarkPeriod is the HTTP level's own: each run there also
	// starts and stops a server.
	httpBookmarkPeriod time.Duration
	httpFanOutWatch    []int
}

var (
	fullSizes = sizes{
		idleWatchers:     []int{1_000, 10_000, 100_000},
		bookmarkWatchers: []int{1_000, 100_000},
		bookmarkPeriod:   time.Minute,
		fanOutWatchers:   []int{1_000, 10_000},
		fanOutEvents:     1_000,
		listObjects:      10_000,
		// A p99 of 100 lists is the second slowest, which one scheduling
		// hiccup of the shared machine decides; of 500, the fifth.
		listRepeats:      500,
		listExactAge:     30 * time.Second,
		watchListObjects: 1_000,
		watchListRepeats: 5,
		exactKeyWatchers: []int{1_000, 10_000, 100_000},
		exactKeyObjects:  10_000,
		exactKeyWrites:   1_000,
		exactKeyPairs:    3,
		httpFanOutPairs:  3,
		stormPods:        50_000,
		stormNodes:       500,
		stormRate:        200,
		memoryObjects:    []int{10_000, 100_000},
		shardedWatchers:  []int{64},
		shardedEvents:    5_000,
		prevKVObjects:    2_000,
		budgetObjects:    20_000,
		slowTaxWatchers:  1_000,
		slowTaxSlow:      1,
		slowTaxEvents:    2_000,
		slowTaxRate:      200,
		restartResources: 60,
		restartObjects:   1_000,
		restartEvents:    100_000,
		// HTTP watches each hold a stream in the server and in the client
		// process, so the HTTP level stops an order of magnitude lower.
		httpIdleWatchers:   []int{1_000, 10_000},
		httpBookmarkWatch:  []int{1_000, 10_000},
		httpBookmarkPeriod: time.Minute,
		httpFanOutWatch:    []int{1_000},
	}
	quickSizes = sizes{
		idleWatchers:     []int{1_000, 10_000},
		bookmarkWatchers: []int{1_000, 10_000},
		bookmarkPeriod:   20 * time.Second,
		fanOutWatchers:   []int{1_000},
		fanOutEvents:     500,
		listObjects:      2_000,
		listRepeats:      30,
		listExactAge:     5 * time.Second,
		watchListObjects: 1_000,
		watchListRepeats: 5,
		exactKeyWatchers: []int{1_000, 10_000},
		exactKeyObjects:  10_000,
		exactKeyWrites:   1_000,
		stormPods:        5_000,
		stormNodes:       50,
		stormRate:        50,
		memoryObjects:    []int{2_000},
		shardedWatchers:  []int{8},
		shardedEvents:    500,
		prevKVObjects:    300,
		budgetObjects:    2_000,
		slowTaxWatchers:  100,
		slowTaxSlow:      1,
		slowTaxEvents:    1_200,
		slowTaxRate:      400,
		restartResources: 10,
		restartObjects:   100,
		restartEvents:    4_000,
		httpIdleWatchers: []int{1_000},
		// Each watch's deadline makes it due one bookmark a period after it
		// opened, as at the storage level (see httpbench.Bookmarks); the
		// period is shorter than the storage level's to fit the 4-minute
		// budget of make bench-quick with a server start per run.
		httpBookmarkWatch:  []int{1_000},
		httpBookmarkPeriod: 10 * time.Second,
		httpFanOutWatch:    []int{1_000},
	}
)

// plan lists the runs in the order they execute: scenario by scenario, each
// size with both decorators back to back, so a slow drift of the machine
// hits both alike, and which of the two goes first alternating from pair to
// pair, so that what a place in the order costs (etcd's database grown by
// the run before, the page cache) falls on each cache as often. The storage
// level's idle, exactkey and memory also run the baseline none, no cache,
// before each pair. skipped names the selected scenarios this mode does not run,
// for the report.
func plan(sz sizes, scenarios, levels []string) (runs []runSpec, skipped []string) {
	orders := [2][]string{{decUpstream, decWatchkeeper}, {decWatchkeeper, decUpstream}}
	pairs := 0
	for _, level := range levels {
		for _, sc := range scenarios {
			if level == "http" && !slices.Contains(httpScenarios, sc) {
				continue
			}
			rs := scenarioRuns(sz, sc, level)
			if len(rs) == 0 {
				skipped = append(skipped, sc+"/"+level)
			}
			for _, r := range rs {
				for p := range max(r.Pairs, 1) {
					decs := orders[pairs%2]
					pairs++
					if level == "storage" && slices.Contains(withBaseline, sc) {
						decs = append([]string{decNone}, decs...)
					}
					switch sc {
					case "restart":
						// The question it asks: is it the backfill after
						// each list?
						decs = append(slices.Clone(decs), storagebench.WatchkeeperNoBackfill)
					case "memory":
						// What sharing siblings' memory saves, and what
						// it costs the start; what compact form saves.
						decs = append(slices.Clone(decs), storagebench.WatchkeeperUnshared, storagebench.WatchkeeperCompact)
					case "list", "fanout":
						// What compact form's decodes cost a read.
						if level == "storage" {
							decs = append(slices.Clone(decs), storagebench.WatchkeeperCompact)
						}
					case "budget":
						// What a budget saves and costs, beside the cache
						// without one.
						decs = append(slices.Clone(decs), storagebench.WatchkeeperBudget)
					}
					r.Pair = p
					for _, d := range decs {
						r.Decorator = d
						runs = append(runs, r)
					}
				}
			}
		}
	}
	return runs, skipped
}

func scenarioRuns(sz sizes, sc, level string) []runSpec {
	idleW, bookW, fanW := sz.idleWatchers, sz.bookmarkWatchers, sz.fanOutWatchers
	period := sz.bookmarkPeriod
	if level == "http" {
		idleW, bookW, fanW = sz.httpIdleWatchers, sz.httpBookmarkWatch, sz.httpFanOutWatch
		period = sz.httpBookmarkPeriod
	}
	var runs []runSpec
	switch sc {
	case "idle":
		for _, n := range idleW {
			runs = append(runs, runSpec{Scenario: sc, Level: level, Watchers: n, Timeout: scaled(time.Minute, n)})
		}
	case "bookmarks":
		for _, n := range bookW {
			runs = append(runs, runSpec{Scenario: sc, Level: level, Watchers: n, Period: period,
				Timeout: period + scaled(time.Minute, n)})
		}
	case "fanout":
		pairs := 1
		if level == "http" {
			pairs = sz.httpFanOutPairs
		}
		for _, n := range fanW {
			runs = append(runs, runSpec{Scenario: sc, Level: level, Watchers: n, Events: sz.fanOutEvents,
				Timeout: scaled(2*time.Minute, n), Pairs: pairs})
		}
	case "list":
		runs = append(runs, runSpec{Scenario: sc, Level: level, Objects: sz.listObjects, Repeats: sz.listRepeats, Period: sz.listExactAge, Timeout: 5 * time.Minute})
	case "watchlist":
		runs = append(runs, runSpec{Scenario: sc, Level: level, Objects: sz.watchListObjects, Repeats: sz.watchListRepeats, Timeout: 3 * time.Minute})
	case "exactkey":
		for _, n := range sz.exactKeyWatchers {
			runs = append(runs, runSpec{Scenario: sc, Level: level, Watchers: n, Objects: sz.exactKeyObjects,
				Events: sz.exactKeyWrites, Timeout: scaled(time.Minute, n), Pairs: sz.exactKeyPairs})
		}
	case "storm":
		runs = append(runs, runSpec{Scenario: sc, Level: level, Watchers: sz.stormNodes, Objects: sz.stormPods,
			Rate: sz.stormRate, Timeout: 5 * time.Minute})
	case "memory":
		for _, kind := range storagebench.MemoryKinds {
			for _, n := range sz.memoryObjects {
				if kind == storagebench.CustomResources && n > maxCustomResources {
					// Held as Unstructured, 100k of them with their
					// previous versions would take most of the machine.
					continue
				}
				// Writing 100k realistic pods twice, and a GC of
				// a heap of a few GB, take minutes.
				runs = append(runs, runSpec{Scenario: sc, Level: level, Objects: n, Kind: kind,
					Timeout: 2*time.Minute + time.Minute*time.Duration(n/10_000)})
			}
		}
	case "sharded":
		for _, n := range sz.shardedWatchers {
			runs = append(runs, runSpec{Scenario: sc, Level: level, Watchers: n, Events: sz.shardedEvents,
				Timeout: scaled(2*time.Minute, n)})
		}
	case "prevkv":
		// The gate is process-wide: each value is a run of its own, both
		// caches with each.
		for _, without := range []bool{true, false} {
			runs = append(runs, runSpec{Scenario: sc, Level: level, Objects: sz.prevKVObjects,
				FeatureGates: fmt.Sprintf("%s=%t", features.WatchFromStorageWithoutPrevKV, without),
				Timeout:      3 * time.Minute})
		}
	case "budget":
		runs = append(runs, runSpec{Scenario: sc, Level: level, Objects: sz.budgetObjects, Timeout: 5 * time.Minute})
	case "restart":
		runs = append(runs, runSpec{Scenario: sc, Level: level, Watchers: sz.restartResources, Objects: sz.restartObjects,
			Events: sz.restartEvents, Timeout: 5 * time.Minute})
	case "slowtax":
		phases := 3 * time.Duration(sz.slowTaxEvents) * time.Second / time.Duration(max(sz.slowTaxRate, 1))
		runs = append(runs, runSpec{Scenario: sc, Level: level, Watchers: sz.slowTaxWatchers, Objects: sz.slowTaxSlow,
			Events: sz.slowTaxEvents, Rate: sz.slowTaxRate, Timeout: phases + scaled(time.Minute, sz.slowTaxWatchers)})
	}
	return runs
}

// takesHeapProfile is whether run r writes a heap profile: the memory
// scenario's realistic pods at its largest size, each decorator once.
func takesHeapProfile(r runSpec, sz sizes) bool {
	return r.Scenario == "memory" && r.Kind == storagebench.RealisticPods &&
		len(sz.memoryObjects) > 0 && r.Objects == slices.Max(sz.memoryObjects)
}

// scaled grows a timeout with the number of watches: base, plus base per
// 10,000 watches (100k watches get 11x: the largest runs are the slow ones).
func scaled(base time.Duration, watchers int) time.Duration {
	return base + base*time.Duration(watchers/10_000)
}
