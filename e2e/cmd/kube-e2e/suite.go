package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
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
}

// suiteResult is every test's outcome against one cache.
type suiteResult map[string]outcome

// runSuite runs Kubernetes' e2e tests once against each cache, on a fresh
// cluster each, and prints the side-by-side table.
func runSuite(ctx context.Context, run *runDir, cfg config, r *kubecluster.Report) {
	results := map[string]suiteResult{}
	for _, cache := range suiteCaches {
		var c *cluster
		if !r.Step(fmt.Sprintf("suite: cluster on the %s cache ready", cacheName(cache)), func() (string, error) {
			start := time.Now()
			var err error
			c, err = startCluster(ctx, run, cfg, cache)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("%s, kube-controller-manager, kube-scheduler, kwok with %d nodes Ready, in %v",
				c.url, simulatedNodes, time.Since(start).Round(100*time.Millisecond)), nil
		}) {
			continue
		}
		r.Step(fmt.Sprintf("suite: Kubernetes' e2e tests on the %s cache", cacheName(cache)), func() (string, error) {
			start := time.Now()
			res, err := runTests(ctx, run, cfg, c, cache)
			if err != nil {
				return "", err
			}
			results[cache] = res
			p, f, s := res.counts()
			return fmt.Sprintf("%d passed, %d failed, %d skipped in %v", p, f, s, time.Since(start).Round(time.Second)), nil
		})
		c.stop()
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
}

func cacheName(cache string) string {
	if cache == "upstream" {
		return "stock (--watch-cache-decorator=upstream)"
	}
	return "watchkeeper"
}

// runTests runs the e2e test binary under ginkgo against c and reads its
// JSON report.
func runTests(ctx context.Context, run *runDir, cfg config, c *cluster, cache string) (suiteResult, error) {
	out := filepath.Join(run.dir, "suite-"+cache)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	report := filepath.Join(out, "report.json")
	args := []string{
		"--procs=" + fmt.Sprint(cfg.procs),
		"--timeout=" + cfg.suiteTimeout.String(),
		"--json-report=" + report,
		"--no-color",
		"--silence-skips",
		"--focus=" + cfg.focus,
		"--label-filter=" + cfg.labelFilter,
	}
	if cfg.skip != "" {
		args = append(args, "--skip="+cfg.skip)
	}
	args = append(args, cfg.tests, "--",
		"--kubeconfig="+c.adminKubeconfig,
		"--kubectl-path="+cfg.kubectl,
		"--provider=local",
		"--report-dir="+out,
		"--node-schedulable-timeout=2m",
		"--non-blocking-taints=node-role.kubernetes.io/control-plane",
	)
	logPath := filepath.Join(run.dir, "suite-"+cache+".log")
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	fmt.Fprintf(log, "=== %s %s %s\n", time.Now().Format(time.RFC3339), cfg.ginkgo, strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, cfg.ginkgo, args...)
	cmd.Dir = out
	cmd.Stdout, cmd.Stderr = log, log
	runErr := cmd.Run()
	data, err := os.ReadFile(report)
	if err != nil {
		return nil, fmt.Errorf("ginkgo (%v) wrote no report: %w; log %s", runErr, err, logPath)
	}
	var reports []types.Report
	if err := json.Unmarshal(data, &reports); err != nil {
		return nil, fmt.Errorf("reading %s: %w", report, err)
	}
	res := suiteResult{}
	for _, rep := range reports {
		for _, spec := range rep.SpecReports {
			if spec.LeafNodeType != types.NodeTypeIt {
				continue
			}
			if spec.State == types.SpecStateSkipped && spec.Failure.Message == "" {
				continue // not selected by the focus and filters: not part of this run
			}
			o := outcome{state: spec.State.String(), took: spec.RunTime}
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
	if len(res) == 0 {
		return nil, fmt.Errorf("no test in %s (ginkgo: %v); log %s", report, runErr, logPath)
	}
	return res, nil
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
