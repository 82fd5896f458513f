package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
)

// failure is a run that measured nothing or not everything.
type failure struct {
	spec runSpec
	err  error
}

// parentMain plans the runs, starts etcd, runs each spec in its own child,
// and writes the report.
func parentMain(args []string) error {
	started := time.Now()
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	quick := fs.Bool("quick", false, "small sizes and a 20s bookmark period (make bench-quick)")
	scenarioList := fs.String("scenarios", strings.Join(allScenarios, ","), "comma-separated scenarios: "+strings.Join(allScenarios, ","))
	levelList := fs.String("levels", strings.Join(allLevels, ","), "comma-separated levels: "+strings.Join(allLevels, ","))
	outDir := fs.String("out", "_output/bench", "where results.jsonl, results.md and the charts go (a run's output, kept out of docs/)")
	workDir := fs.String("workdir", "_output/bench", "scratch: etcd data, run logs, the sample apiserver binary")
	profDir := fs.String("cpuprofiles", "", "if set, each run writes a CPU profile of its process here (<run>.pprof), for go tool pprof with the bench binary")
	windowDir := fs.String("window-cpuprofiles", "", "if set, each run of a scenario with a measured window (exactkey's writes, restart's resumes) writes a CPU profile of that window only here (<run>.window.pprof); not with -cpuprofiles")
	memoryObjects := fs.String("memory-objects", "", "comma-separated object counts of the memory scenario, instead of the mode's (full: 10000,100000; quick: 2000)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *profDir != "" && *windowDir != "" {
		return fmt.Errorf("-cpuprofiles and -window-cpuprofiles: one CPU profile at a time")
	}
	scenarios, err := pickList(*scenarioList, allScenarios, "scenario")
	if err != nil {
		return err
	}
	levels, err := pickList(*levelList, allLevels, "level")
	if err != nil {
		return err
	}
	sz, mode := fullSizes, "full"
	if *quick {
		sz, mode = quickSizes, "quick"
	}
	if *memoryObjects != "" {
		if sz.memoryObjects, err = parseCounts(*memoryObjects); err != nil {
			return fmt.Errorf("-memory-objects: %w", err)
		}
	}
	if slices.Contains(levels, "http") && !httpLevelAvailable {
		fmt.Fprintln(os.Stderr, "bench: the http level is not available in this build; running storage only")
		levels = slices.DeleteFunc(levels, func(l string) bool { return l == "http" })
	}
	runs, skipped := plan(sz, scenarios, levels)
	if len(runs) == 0 {
		return fmt.Errorf("nothing to run for scenarios %v at levels %v", scenarios, levels)
	}

	self, err := os.Executable()
	if err != nil {
		return err
	}
	logDir := filepath.Join(*workDir, "logs")
	if err := os.RemoveAll(logDir); err != nil {
		return err
	}
	for _, d := range []string{logDir, *outDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var serverBinary string
	if slices.Contains(levels, "http") {
		if serverBinary, err = buildSampleAPIServer(ctx, *workDir); err != nil {
			return err
		}
	}
	etcd, err := startEtcd(self, *workDir, logDir)
	if err != nil {
		return err
	}
	defer etcd.stop()
	fmt.Fprintf(os.Stderr, "bench: %s mode, %d runs, etcd at %s, logs in %s\n", mode, len(runs), etcd.clientURL, logDir)

	var results []result.Result
	var failures []failure
	var heapProfiles []string
	for i, r := range runs {
		if ctx.Err() != nil {
			failures = append(failures, failure{r, fmt.Errorf("not run: interrupted")})
			continue
		}
		c := childFlags{
			spec:   r,
			etcd:   etcd.clientURL,
			prefix: fmt.Sprintf("/bench/%d-%s", started.Unix(), strings.NewReplacer("/", "-").Replace(r.String())),
			quick:  *quick,
		}
		if *profDir != "" {
			if err := os.MkdirAll(*profDir, 0o755); err != nil {
				return err
			}
			if c.cpuProfile, err = filepath.Abs(filepath.Join(*profDir, runFileName(r)+".pprof")); err != nil {
				return err
			}
		}
		if *windowDir != "" {
			if err := os.MkdirAll(*windowDir, 0o755); err != nil {
				return err
			}
			if c.windowProfile, err = filepath.Abs(filepath.Join(*windowDir, runFileName(r)+".window.pprof")); err != nil {
				return err
			}
		}
		if takesHeapProfile(r, sz) {
			if c.heapProfile, err = filepath.Abs(filepath.Join(*outDir, runFileName(r)+".heap.pprof")); err != nil {
				return err
			}
			// Listed in the report only if this run writes it anew.
			if err := os.Remove(c.heapProfile); err != nil && !os.IsNotExist(err) {
				return err
			}
		}
		if r.Level == "http" {
			c.serverBinary = serverBinary
			if c.workDir, err = filepath.Abs(filepath.Join(*workDir, "http", fmt.Sprint(i+1))); err != nil {
				return err
			}
			if err := os.MkdirAll(c.workDir, 0o755); err != nil {
				return err
			}
		}
		t := time.Now()
		fmt.Fprintf(os.Stderr, "bench: [%d/%d] %s ... ", i+1, len(runs), r)
		got, err := runChild(ctx, self, c, logDir)
		if _, statErr := os.Stat(c.heapProfile); c.heapProfile != "" && statErr == nil {
			heapProfiles = append(heapProfiles, c.heapProfile)
		}
		tagPair(got, r)
		results = append(results, got...)
		if err != nil {
			failures = append(failures, failure{r, err})
			fmt.Fprintf(os.Stderr, "FAILED after %v: %v\n", time.Since(t).Round(100*time.Millisecond), err)
			continue
		}
		fmt.Fprintf(os.Stderr, "%v\n", time.Since(t).Round(100*time.Millisecond))
	}
	// results.jsonl keeps every pair's figures; the report, their median.
	if err := writeJSONL(filepath.Join(*outDir, "results.jsonl"), withNetFigures(results)); err != nil {
		return err
	}
	results = withNetFigures(medianOfPairs(results))

	charts, err := drawCharts(*outDir, results)
	if err != nil {
		return fmt.Errorf("charts: %w", err)
	}
	md := markdownReport(reportHeader{mode: mode, command: commandLine(args), took: time.Since(started),
		skipped: skipped, charts: charts, heapProfiles: heapProfiles}, results, failures)
	fmt.Print(md)
	if err := os.WriteFile(filepath.Join(*outDir, "results.md"), []byte(md), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: wrote results.jsonl, results.md and %d charts in %s\n", len(charts), *outDir)
	if len(failures) > 0 {
		return fmt.Errorf("%d of %d runs failed or were incomplete; see the report", len(failures), len(runs))
	}
	return nil
}

func pickList(list string, known []string, what string) ([]string, error) {
	var out []string
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !slices.Contains(known, s) {
			return nil, fmt.Errorf("unknown %s %q (known: %s)", what, s, strings.Join(known, ", "))
		}
		out = append(out, s)
	}
	return out, nil
}

// parseCounts parses a comma-separated list of positive counts.
func parseCounts(list string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive count", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func commandLine(args []string) string {
	return strings.TrimSpace("go run ./hack/bench " + strings.Join(args, " "))
}

// buildSampleAPIServer builds the server the http level runs, once.
func buildSampleAPIServer(ctx context.Context, workDir string) (string, error) {
	bin, err := filepath.Abs(filepath.Join(workDir, "sample-apiserver"))
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./sample-apiserver")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	fmt.Fprintln(os.Stderr, "bench: go build -o", bin, "./sample-apiserver")
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building the sample apiserver: %w", err)
	}
	return bin, nil
}
