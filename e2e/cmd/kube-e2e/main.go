// Command kube-e2e runs kube-apiserver v1.38.0-beta.0 on watchkeeper (make
// kube-apiserver's bin/kube-apiserver-watchkeeper) on loopback, with
// nothing but Go: `make kube-e2e`.
//
// First it checks the binary's own properties, one PASS or FAIL line each:
// watchkeeper's flag section in --help; every resource the stock cache
// serves is served by watchkeeper (built-in, custom resources, APIServices)
// and nothing the stock server leaves uncached; upstream's
// apiserver_watch_cache_* series; /readyz following the caches; the stock
// cache from the same binary with --watch-cache-decorator=upstream; and a
// SIGTERM with open watches stopping in seconds.
//
// Then (-suite) it runs Kubernetes' own e2e tests of [sig-api-machinery]
// against a cluster of etcd, that kube-apiserver, kube-controller-manager,
// kube-scheduler and kwok's simulated nodes, once with the stock cache and
// once with watchkeeper, and prints one line per test with both results.
//
// Every child is stopped on exit, on failure and on Ctrl-C; if the driver
// itself is killed, the kernel kills them (Pdeathsig). Its closing line is
// "kube-e2e: N passed, N failed"; it exits non-zero if any step failed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/watchkeeper/watchkeeper/e2e/internal/kubecluster"
)

type config struct {
	kubeAPIServer string
	checks        bool
	stockShutdown bool
	keep          bool

	// The suite's.
	suite                              bool
	controllerManager, scheduler, kwok string
	kwokStages                         string
	kubectl, ginkgo, tests             string
	procs                              int
	cachesAtOnce                       bool
	watchkeeperArgs                    string
	suiteTimeout                       time.Duration
	focus, skip, labelFilter, last     string
}

// runDir is one run's directory and certificates.
type runDir struct {
	dir string
	pki *kubecluster.PKI
}

func main() {
	var cfg config
	flag.StringVar(&cfg.kubeAPIServer, "kube-apiserver", "bin/kube-apiserver-watchkeeper", "kube-apiserver on watchkeeper (make kube-apiserver)")
	flag.BoolVar(&cfg.checks, "checks", true, "check the binary's properties (flags, caches, metrics, readiness, shutdown)")
	flag.BoolVar(&cfg.stockShutdown, "stock-shutdown", true, "also time a SIGTERM of the stock cache with open watches, for comparison (about 60s)")
	flag.BoolVar(&cfg.keep, "keep", false, "keep the run's directory (certificates, kubeconfigs, logs, etcd data, test reports)")
	flag.BoolVar(&cfg.suite, "suite", true, "run Kubernetes' e2e tests against each cache")
	flag.StringVar(&cfg.controllerManager, "kube-controller-manager", "bin/kube-controller-manager", "kube-controller-manager")
	flag.StringVar(&cfg.scheduler, "kube-scheduler", "bin/kube-scheduler", "kube-scheduler")
	flag.StringVar(&cfg.kwok, "kwok", "bin/kwok", "kwok, the simulated nodes")
	flag.StringVar(&cfg.kwokStages, "kwok-stages", "", "kwok's kustomize/stage directory, in its module (make kube-e2e finds it)")
	flag.StringVar(&cfg.kubectl, "kubectl", "bin/kubectl", "kubectl, which some tests run")
	flag.StringVar(&cfg.ginkgo, "ginkgo", "bin/ginkgo", "the ginkgo v2 runner")
	flag.StringVar(&cfg.tests, "tests", "bin/kubetests.test", "the e2e test binary (e2e/kubetests)")
	flag.IntVar(&cfg.procs, "procs", 4, "ginkgo's parallel processes, per cache")
	flag.StringVar(&cfg.watchkeeperArgs, "watchkeeper-args", "",
		"more flags for the suite's kube-apiserver on watchkeeper, space separated, e.g. a short bookmark frequency")
	flag.BoolVar(&cfg.cachesAtOnce, "caches-at-once", true, "run the suite against both caches at the same time, each on its own cluster")
	flag.DurationVar(&cfg.suiteTimeout, "suite-timeout", 2*time.Hour, "ginkgo's timeout, per cache")
	flag.StringVar(&cfg.focus, "focus", `\[sig-api-machinery\]`, "ginkgo's focus")
	flag.StringVar(&cfg.skip, "skip", "", "ginkgo's skip")
	flag.StringVar(&cfg.last, "last", `\[sig-api-machinery\] Aggregator|OpenAPIV3 should contain OpenAPI V3 for Aggregated APIServer`,
		"tests to run in a second pass, after the others: those that leave an unavailable aggregated APIService, which stops namespace deletion")
	flag.StringVar(&cfg.labelFilter, "label-filter",
		"!Disruptive && !Flaky && !Alpha && !OffByDefault && (Feature: isEmpty || Feature: containsAny {PodPriority, ComprehensiveNamespaceDraining})",
		"ginkgo's label filter: what a default cluster runs (no disruption, no feature off by default), and the two features "+
			"of resource_quota.go and namespace.go tests that it has (priority classes, namespace draining)")
	flag.Parse()
	kubecluster.Main(func(ctx context.Context) int { return run(ctx, cfg) },
		&cfg.kubeAPIServer, &cfg.controllerManager, &cfg.scheduler, &cfg.kwok, &cfg.kubectl, &cfg.ginkgo, &cfg.tests)
}

func run(ctx context.Context, cfg config) int {
	start := time.Now()
	dir, done, err := kubecluster.RunDir("watchkeeper-kube-e2e-", cfg.keep)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer done()
	r := &kubecluster.Report{Name: "kube-e2e"}
	rd := &runDir{dir: dir}
	if !r.Step("setup: certificates", func() (string, error) {
		rd.pki, err = kubecluster.NewPKI(dir)
		return "cluster CA, serving cert, front-proxy, service-account key, client certs", err
	}) {
		return r.Close(start)
	}
	if cfg.checks {
		runChecks(ctx, rd, cfg, r)
	}
	if cfg.suite {
		runSuite(ctx, rd, cfg, r)
	}
	return r.Close(start)
}
