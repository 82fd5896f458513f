package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
	"github.com/watchkeeper/watchkeeper/hack/bench/internal/storagebench"
)

// hardTimeoutMargin is how long past its deadline a child may take to clean
// up before it exits regardless.
const hardTimeoutMargin = 30 * time.Second

// childFlags are a child run's command line: a runSpec plus where things are.
type childFlags struct {
	spec         runSpec
	etcd, prefix string
	serverBinary string
	workDir      string
	quick        bool
	// cpuProfile, when set, is where the child writes a CPU profile of
	// its whole run (the parent's -cpuprofiles names one per run).
	cpuProfile string
	// windowProfile, when set, is a profile of the scenario's measured
	// window only (storagebench.Env.WindowProfile; the parent's
	// -window-cpuprofiles names one per run); not with cpuProfile.
	windowProfile string
	// heapProfile, when set, is where the memory scenario writes a heap
	// profile of the state it measures (storagebench.Env.HeapProfile).
	heapProfile string
}

func (c childFlags) args() []string {
	r := c.spec
	a := []string{"run",
		"--scenario", r.Scenario, "--level", r.Level, "--decorator", r.Decorator,
		"--watchers", fmt.Sprint(r.Watchers), "--events", fmt.Sprint(r.Events),
		"--objects", fmt.Sprint(r.Objects), "--repeats", fmt.Sprint(r.Repeats),
		"--rate", fmt.Sprint(r.Rate), "--period", r.Period.String(), "--timeout", r.Timeout.String(),
		"--etcd", c.etcd, "--prefix", c.prefix,
		"--exit-on-stdin-eof",
	}
	if c.serverBinary != "" {
		a = append(a, "--server-binary", c.serverBinary, "--workdir", c.workDir)
	}
	if c.quick {
		a = append(a, "--quick")
	}
	if c.cpuProfile != "" {
		a = append(a, "--cpuprofile", c.cpuProfile)
	}
	if c.windowProfile != "" {
		a = append(a, "--cpuprofile-window", c.windowProfile)
	}
	if r.Kind != "" {
		a = append(a, "--kind", r.Kind)
	}
	if r.FeatureGates != "" {
		a = append(a, "--feature-gates", r.FeatureGates)
	}
	if c.heapProfile != "" {
		a = append(a, "--heapprofile", c.heapProfile)
	}
	return a
}

// runMain is `bench run`: one scenario in this fresh process, results as
// JSON lines on stdout, logs on stderr.
func runMain(args []string) error {
	var c childFlags
	var watchParent bool
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	fs.StringVar(&c.spec.Scenario, "scenario", "", "idle, bookmarks, fanout, list, watchlist, exactkey, storm, memory, sharded, prevkv, slowtax, restart or budget")
	fs.StringVar(&c.spec.Level, "level", "storage", "storage or http")
	fs.StringVar(&c.spec.Decorator, "decorator", "", "upstream, watchkeeper, or none (idle baseline)")
	fs.IntVar(&c.spec.Watchers, "watchers", 0, "watches to open (storm: nodes, one WatchList each; sharded: shards)")
	fs.IntVar(&c.spec.Events, "events", 0, "events to write (fanout, exactkey, sharded; slowtax: per phase)")
	fs.IntVar(&c.spec.Objects, "objects", 0, "objects in the resource (list, watchlist, exactkey, storm, memory, prevkv, budget); slow watchers (slowtax)")
	fs.StringVar(&c.spec.FeatureGates, "feature-gates", "", "feature gates to set in this process before the run, key=value,... (k8s.io/apiserver's, e.g. WatchFromStorageWithoutPrevKV=false)")
	fs.StringVar(&c.spec.Kind, "kind", "", "kind of object (memory): "+strings.Join(storagebench.MemoryKinds, ", "))
	fs.IntVar(&c.spec.Repeats, "repeats", 0, "timed repetitions (list, watchlist)")
	fs.IntVar(&c.spec.Rate, "rate", 0, "writes per second (storm, slowtax)")
	fs.DurationVar(&c.spec.Period, "period", time.Minute, "bookmark period (bookmarks); how old the exact-RV list's RV is (list)")
	fs.DurationVar(&c.spec.Timeout, "timeout", 5*time.Minute, "deadline of the run")
	fs.StringVar(&c.etcd, "etcd", "", "etcd client URL")
	fs.StringVar(&c.prefix, "prefix", "", "etcd key prefix of this run")
	fs.StringVar(&c.serverBinary, "server-binary", "", "sample apiserver binary (http level)")
	fs.StringVar(&c.workDir, "workdir", "", "scratch directory (http level)")
	fs.BoolVar(&c.quick, "quick", false, "quick mode (http level)")
	fs.BoolVar(&watchParent, "exit-on-stdin-eof", false, "exit when stdin closes (set by the parent)")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the run here")
	fs.StringVar(&c.windowProfile, "cpuprofile-window", "", "write a CPU profile of the measured window only here (exactkey, restart); not with --cpuprofile")
	fs.StringVar(&c.heapProfile, "heapprofile", "", "write a heap profile of the measured state here (memory)")
	klog.InitFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.cpuProfile != "" && c.windowProfile != "" {
		return fmt.Errorf("--cpuprofile and --cpuprofile-window: one CPU profile at a time")
	}
	if c.cpuProfile != "" {
		stop, err := storagebench.StartCPUProfile(c.cpuProfile)
		if err != nil {
			return err
		}
		defer func() {
			if err := stop(); err != nil {
				klog.ErrorS(err, "CPU profile not saved", "path", c.cpuProfile)
			}
		}()
	}
	if c.spec.FeatureGates != "" {
		// The gates are process-wide, read by both caches as they are
		// built (and by upstream's at each watch of etcd): set before
		// any storage exists.
		if err := utilfeature.DefaultMutableFeatureGate.Set(c.spec.FeatureGates); err != nil {
			return fmt.Errorf("--feature-gates: %w", err)
		}
	}
	if watchParent {
		exitWhenParentGone()
	}
	if c.prefix == "" {
		c.prefix = fmt.Sprintf("/bench/manual-%d", time.Now().UnixNano())
	}
	time.AfterFunc(c.spec.Timeout+hardTimeoutMargin, func() {
		fmt.Fprintf(os.Stderr, "bench run %s: hard timeout after %v\n", c.spec, c.spec.Timeout+hardTimeoutMargin)
		os.Exit(3)
	})
	ctx, cancel := context.WithTimeout(context.Background(), c.spec.Timeout)
	defer cancel()

	results, err := runScenario(ctx, c)
	enc := json.NewEncoder(os.Stdout)
	for _, r := range results {
		if encErr := enc.Encode(r); encErr != nil {
			return encErr
		}
	}
	klog.Flush()
	return err
}

// storageScenarios are package storagebench's scenarios: all of them.
var storageScenarios = scenarioFuncs[storagebench.Env]{
	idle:      storagebench.Idle,
	bookmarks: storagebench.Bookmarks,
	fanout:    storagebench.FanOut,
	list:      storagebench.List,
	watchlist: storagebench.WatchList,
	exactkey:  storagebench.ExactKey,
	storm:     storagebench.Storm,
	memory:    storagebench.Memory,
	sharded:   storagebench.Sharded,
	prevkv:    storagebench.PrevKV,
	slowtax:   storagebench.SlowTax,
	restart:   storagebench.Restart,
	budget:    storagebench.Budget,
}

func runScenario(ctx context.Context, c childFlags) ([]result.Result, error) {
	r := c.spec
	switch r.Level {
	case "storage":
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		env := storagebench.Env{EtcdEndpoint: c.etcd, Prefix: c.prefix, WindowProfile: c.windowProfile, HeapProfile: c.heapProfile, Self: self}
		if rs, ok, err := storageScenarios.run(ctx, env, r); ok {
			return rs, err
		}
	case "http":
		return runHTTPScenario(ctx, c)
	}
	return nil, fmt.Errorf("no scenario %q at level %q", r.Scenario, r.Level)
}
