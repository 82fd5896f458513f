package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/watchkeeper/watchkeeper/e2e/internal/kubecluster"
)

// The caches the suite runs against, in order: the stock one first, so a
// test that fails on both shows the stock failure first.
var suiteCaches = []string{"upstream", "watchkeeper"}

// outcome is one test's result against one cache.
type outcome struct {
	state   string // passed, failed, skipped
	message string // a failure's first line
	took    time.Duration
	file    string // the test's file in test/e2e/apimachinery
}

// mustPass are the files of test/e2e/apimachinery whose tests must all run
// and pass on both caches (issue 26): watches, lists and consistency.
var mustPass = []string{"watch.go", "chunking.go", "watchlist.go", "crd_watch.go", "resource_quota.go",
	"namespace.go", "garbage_collector.go", "table_conversion.go", "apply.go", "field_validation.go"}

// suiteResult is every test's outcome against one cache.
type suiteResult map[string]outcome

// suiteRun is the run against one cache.
type suiteRun struct {
	cache   string
	cluster *kubecluster.Cluster
	result  suiteResult
	err     error
	took    time.Duration
}

// runSuite runs Kubernetes' e2e tests once against each cache, each on a
// fresh cluster (both at once with -caches-at-once: the tests mostly wait,
// and both sides then run on the same loaded machine), and prints the
// side-by-side table.
func runSuite(ctx context.Context, run *runDir, cfg config, r *kubecluster.Report) {
	runs := make([]*suiteRun, len(suiteCaches))
	for i, cache := range suiteCaches {
		runs[i] = &suiteRun{cache: cache}
	}
	setup := func(sr *suiteRun) bool {
		return r.Step(fmt.Sprintf("suite: cluster on the %s cache ready", cacheName(sr.cache)), func() (string, error) {
			start := time.Now()
			var err error
			sr.cluster, err = startCluster(ctx, run, cfg, sr.cache)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("%s, kube-controller-manager, kube-scheduler, kwok with %d nodes Ready, in %v",
				sr.cluster.URL, simulatedNodes, time.Since(start).Round(100*time.Millisecond)), nil
		})
	}
	test := func(sr *suiteRun) {
		start := time.Now()
		sr.result, sr.err = runTests(ctx, run, cfg, sr.cluster, sr.cache)
		sr.took = time.Since(start)
	}
	report := func(sr *suiteRun) {
		r.Step(fmt.Sprintf("suite: Kubernetes' e2e tests on the %s cache", cacheName(sr.cache)), func() (string, error) {
			if sr.err != nil {
				return "", sr.err
			}
			p, f, s := sr.result.counts()
			return fmt.Sprintf("%d passed, %d failed, %d skipped in %v", p, f, s, sr.took.Round(time.Second)), nil
		})
	}
	if cfg.cachesAtOnce {
		var wg sync.WaitGroup
		for _, sr := range runs {
			if setup(sr) {
				wg.Go(func() { test(sr) })
			}
		}
		wg.Wait()
		for _, sr := range runs {
			if sr.cluster != nil {
				report(sr)
				sr.cluster.Stop()
			}
		}
	} else {
		for _, sr := range runs {
			if setup(sr) {
				test(sr)
				report(sr)
				sr.cluster.Stop()
			}
		}
	}
	results := map[string]suiteResult{}
	for _, sr := range runs {
		if sr.err == nil && sr.result != nil {
			results[sr.cache] = sr.result
		}
	}
	stock, ours := results["upstream"], results["watchkeeper"]
	if stock == nil || ours == nil {
		return
	}
	printTable(os.Stdout, stock, ours)
	r.Step("suite: every test that passes on the stock cache passes on watchkeeper", func() (string, error) {
		var regressed []string
		for name, o := range stock {
			if o.state == types.SpecStatePassed.String() && ours[name].state != types.SpecStatePassed.String() {
				regressed = append(regressed, fmt.Sprintf("%s: %s %s", name, ours[name].state, ours[name].message))
			}
		}
		slices.Sort(regressed)
		if len(regressed) > 0 {
			return "", fmt.Errorf("%d tests pass on stock, not on watchkeeper:\n  %s", len(regressed), strings.Join(regressed, "\n  "))
		}
		p, _, _ := stock.counts()
		return fmt.Sprintf("all %d", p), nil
	})
	r.Step("suite: every test of "+strings.Join(mustPass, ", ")+" passes on both", func() (string, error) {
		var problems, figures []string
		for _, f := range mustPass {
			n := 0
			for name, o := range stock {
				if o.file != f {
					continue
				}
				n++
				if o.state != types.SpecStatePassed.String() || ours[name].state != types.SpecStatePassed.String() {
					problems = append(problems, fmt.Sprintf("%s: %s: stock %s, watchkeeper %s", f, name, o.state, ours[name].state))
				}
			}
			if n == 0 {
				problems = append(problems, f+": no test ran")
			}
			figures = append(figures, fmt.Sprintf("%s %d", f, n))
		}
		slices.Sort(problems)
		if len(problems) > 0 {
			return "", errors.New(strings.Join(problems, "\n  "))
		}
		return strings.Join(figures, ", "), nil
	})
}

func cacheName(cache string) string {
	if cache == "upstream" {
		return "stock (--watch-cache-decorator=upstream)"
	}
	return "watchkeeper"
}

// runTests runs the e2e test binary under ginkgo against c and reads its
// JSON reports. The tests that cfg.last names run in a second pass, after
// the others: they register an aggregated APIService served by a pod, which
// cannot come up without real containers, and while it is registered and
// unavailable the namespace controller deletes no namespace ("stale
// GroupVersion discovery"), which would fail the Namespaces tests that run
// after them on either cache.
func runTests(ctx context.Context, run *runDir, cfg config, c *kubecluster.Cluster, cache string) (suiteResult, error) {
	out := filepath.Join(run.dir, "suite-"+cache)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	logPath := filepath.Join(run.dir, "suite-"+cache+".log")
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	passes := []struct{ name, focus, skip string }{{"main", cfg.focus, cfg.skip}}
	if cfg.last != "" {
		passes[0].skip = strings.Trim(cfg.skip+"|"+cfg.last, "|")
		passes = append(passes, struct{ name, focus, skip string }{"last", cfg.last, cfg.skip})
	}
	res := suiteResult{}
	for _, pass := range passes {
		report := filepath.Join(out, "report-"+pass.name+".json")
		args := []string{
			"--procs=" + fmt.Sprint(cfg.procs),
			"--timeout=" + cfg.suiteTimeout.String(),
			"--json-report=" + report,
			"--no-color",
			"--silence-skips",
			"--focus=" + pass.focus,
			"--label-filter=" + cfg.labelFilter,
		}
		if pass.skip != "" {
			args = append(args, "--skip="+pass.skip)
		}
		args = append(args, cfg.tests, "--",
			"--kubeconfig="+c.AdminKubeconfig,
			"--kubectl-path="+cfg.kubectl,
			"--provider=local",
			"--report-dir="+out,
			"--node-schedulable-timeout=2m",
		)
		fmt.Fprintf(log, "=== %s %s %s\n", time.Now().Format(time.RFC3339), cfg.ginkgo, strings.Join(args, " "))
		cmd := exec.CommandContext(ctx, cfg.ginkgo, args...)
		// ginkgo and the test processes it starts in a process group of
		// their own, ended together when the run is cancelled.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.Dir = out
		cmd.Stdout, cmd.Stderr = log, log
		runErr := cmd.Run()
		if err := readReport(report, res); err != nil {
			return nil, fmt.Errorf("ginkgo (%v): %w; log %s", runErr, err, logPath)
		}
	}
	if len(res) == 0 {
		return nil, fmt.Errorf("no test ran; log %s", logPath)
	}
	return res, nil
}

// readReport adds the tests of a ginkgo JSON report to res.
func readReport(path string, res suiteResult) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var reports []types.Report
	if err := json.Unmarshal(data, &reports); err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	for _, rep := range reports {
		for _, spec := range rep.SpecReports {
			if spec.LeafNodeType != types.NodeTypeIt {
				continue
			}
			if spec.State == types.SpecStateSkipped && spec.Failure.Message == "" {
				continue // not selected by this pass's focus and filters
			}
			o := outcome{state: spec.State.String(), took: spec.RunTime, file: filepath.Base(spec.LeafNodeLocation.FileName)}
			switch spec.State {
			case types.SpecStatePassed:
			case types.SpecStateSkipped, types.SpecStatePending:
				// Skipped by the test itself: it says why.
				o.state = types.SpecStateSkipped.String()
				o.message = firstLine(spec.Failure.Message)
			default:
				o.state = types.SpecStateFailed.String()
				o.message = firstLine(spec.Failure.Message)
			}
			res[spec.FullText()] = o
		}
	}
	return nil
}

func (res suiteResult) counts() (passed, failed, skipped int) {
	for _, o := range res {
		switch o.state {
		case types.SpecStatePassed.String():
			passed++
		case types.SpecStateFailed.String():
			failed++
		default:
			skipped++
		}
	}
	return passed, failed, skipped
}

func short(state string) string {
	switch state {
	case types.SpecStatePassed.String():
		return "pass"
	case types.SpecStateFailed.String():
		return "FAIL"
	case "":
		return "-"
	}
	return "skip"
}

// printTable prints one line per test the run selected, then those that
// failed or skipped themselves on the stock cache with their reason, then
// the summary.
func printTable(w *os.File, stock, ours suiteResult) {
	names := map[string]bool{}
	for n := range stock {
		names[n] = true
	}
	for n := range ours {
		names[n] = true
	}
	sorted := slices.Sorted(func(yield func(string) bool) {
		for n := range names {
			if !yield(n) {
				return
			}
		}
	})
	fmt.Fprintf(w, "\n%-6s %-11s  %s\n", "stock", "watchkeeper", "test")
	regressions, fixes := 0, 0
	for _, n := range sorted {
		s, o := short(stock[n].state), short(ours[n].state)
		mark := ""
		switch {
		case s == "pass" && o != "pass":
			regressions++
			mark = "  <-- watchkeeper only"
		case s != "pass" && o == "pass":
			fixes++
		}
		fmt.Fprintf(w, "%-6s %-11s  %s%s\n", s, o, n, mark)
	}
	for _, state := range []string{types.SpecStateFailed.String(), types.SpecStateSkipped.String()} {
		var lines []string
		for _, n := range sorted {
			if stock[n].state == state {
				lines = append(lines, fmt.Sprintf("  %s\n      %s", n, stock[n].message))
			}
		}
		if len(lines) > 0 {
			fmt.Fprintf(w, "\n%s on the stock cache (%d):\n%s\n", state, len(lines), strings.Join(lines, "\n"))
		}
	}
	sp, sf, ss := stock.counts()
	op, of, oskip := ours.counts()
	fmt.Fprintf(w, "\nkube-e2e table: %d tests; stock %d passed, %d failed, %d skipped; watchkeeper %d passed, %d failed, %d skipped; %d pass on stock only, %d pass on watchkeeper only\n\n",
		len(sorted), sp, sf, ss, op, of, oskip, regressions, fixes)
}
