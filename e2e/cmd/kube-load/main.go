// Command kube-load puts a cluster's load on kube-apiserver v1.38.0-beta.0 on
// watchkeeper and on the stock cache of the same binary, one after the
// other, and prints them side by side: `make kube-load`.
//
// Per cache, on a fresh etcd: kube-apiserver (--watch-cache-decorator),
// kube-controller-manager, kube-scheduler and kwok with N fake nodes; a
// simulated kubelet per node (a client of its own with the node's identity:
// a WatchList of its pods, a watch of its Node, per-object watches of the
// secrets and configmaps its pods mount, its Lease every 10s, its status
// every minute); deployments across namespaces scaled up and down at a set
// pod throughput; stamped writes whose watch events the kubelets time; a
// start storm of every kubelet's WatchList at a third of the run and a
// kube-apiserver restart at two thirds. Measured: API call latency per verb
// and resource against SIG Scalability's SLOs, watch event latency,
// kube-apiserver's CPU, peak RSS and the caches' heap, relists, 410s and
// watches ended by the server, pod startup latency. docs/kube-load.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/klog/v2"

	"github.com/watchkeeper/watchkeeper/e2e/internal/kubecluster"
)

type config struct {
	kubeAPIServer, controllerManager, scheduler, kwok, kwokStages string

	nodes, pods             int
	duration                time.Duration
	churnRate               float64
	podStamps, objectStamps float64
	restart                 bool
	first                   string
	rounds                  int
	watchkeeperArgs         string
	serverArgs              string
	calibrate               bool
	profileDir              string
	keep                    bool
}

// runDir is one run's directory and certificates.
type runDir struct {
	dir string
	pki *kubecluster.PKI
}

func main() {
	var cfg config
	flag.StringVar(&cfg.kubeAPIServer, "kube-apiserver", "bin/kube-apiserver-watchkeeper", "kube-apiserver on watchkeeper (make kube-apiserver)")
	flag.StringVar(&cfg.controllerManager, "kube-controller-manager", "bin/kube-controller-manager", "kube-controller-manager")
	flag.StringVar(&cfg.scheduler, "kube-scheduler", "bin/kube-scheduler", "kube-scheduler")
	flag.StringVar(&cfg.kwok, "kwok", "bin/kwok", "kwok, the simulated nodes")
	flag.StringVar(&cfg.kwokStages, "kwok-stages", "", "kwok's kustomize/stage directory, in its module (make kube-load finds it)")
	flag.IntVar(&cfg.nodes, "nodes", 100, "simulated nodes, each with a kubelet-shaped client")
	flag.IntVar(&cfg.pods, "pods", 1000, "pods the deployments hold, spread over the nodes")
	flag.DurationVar(&cfg.duration, "duration", 3*time.Minute, "the measured run per cache, after the pods are Running")
	flag.Float64Var(&cfg.churnRate, "churn", 5, "pods created (and as many deleted) per second by scaling deployments (20 saturates a 2-core machine at 100 nodes: latency then measures the queue, and any other process's CPU moves it)")
	flag.Float64Var(&cfg.podStamps, "pod-stamps", 10, "stamped pod writes per second, whose watch events the pods' kubelets time")
	flag.Float64Var(&cfg.objectStamps, "object-stamps", 2, "stamped secret and configmap writes per second, timed by the kubelets whose pods mount them")
	flag.BoolVar(&cfg.restart, "restart", true, "restart kube-apiserver at two thirds of the run")
	flag.StringVar(&cfg.first, "first", "watchkeeper", "the cache that runs first: watchkeeper or upstream (the order alternates with -rounds)")
	flag.IntVar(&cfg.rounds, "rounds", 1, "rounds of both caches, the order alternating")
	flag.StringVar(&cfg.watchkeeperArgs, "watchkeeper-args", "", "more flags for kube-apiserver on watchkeeper, space separated")
	flag.StringVar(&cfg.serverArgs, "server-args", "", "more flags for both caches' kube-apiserver (e.g. --v=1 to log the shutdown's watch drain), space separated")
	flag.BoolVar(&cfg.calibrate, "calibrate", false, "an A/A run: the watchkeeper column runs the stock cache too, so every ratio shows the run-to-run noise of its figure at this size")
	flag.StringVar(&cfg.profileDir, "profile-dir", "", "save kube-apiserver's CPU profile (30s of steady churn) and heap profile (before the storm) per cache here")
	flag.BoolVar(&cfg.keep, "keep", false, "keep the run's directory (certificates, logs, etcd data)")
	flag.Parse()
	if cfg.first != "watchkeeper" && cfg.first != "upstream" {
		fmt.Fprintln(os.Stderr, "-first: watchkeeper or upstream")
		os.Exit(2)
	}
	if cfg.calibrate && cfg.watchkeeperArgs != "" {
		fmt.Fprintln(os.Stderr, "-calibrate runs the stock cache in both columns: -watchkeeper-args has nothing to apply to")
		os.Exit(2)
	}
	if cfg.nodes < 1 || cfg.pods < groupsFor(cfg.nodes)*deploymentsPerNamespace || cfg.duration < 30*time.Second {
		fmt.Fprintf(os.Stderr, "-nodes >= 1, -pods >= %d (a pod per deployment), -duration >= 30s\n", groupsFor(cfg.nodes)*deploymentsPerNamespace)
		os.Exit(2)
	}
	paths := []*string{&cfg.kubeAPIServer, &cfg.controllerManager, &cfg.scheduler, &cfg.kwok}
	if cfg.profileDir != "" {
		paths = append(paths, &cfg.profileDir)
	}
	kubecluster.Main(func(ctx context.Context) int { return run(ctx, cfg) }, paths...)
}

func run(ctx context.Context, cfg config) int {
	start := time.Now()
	dir, done, err := kubecluster.RunDir("watchkeeper-kube-load-", cfg.keep)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer done()
	// client-go's logs (a thousand reflectors reconnecting) go to a file.
	logFile, err := os.Create(filepath.Join(dir, "kube-load-clients.log"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer logFile.Close()
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	for name, value := range map[string]string{"logtostderr": "false", "stderrthreshold": "FATAL"} {
		if err := klogFlags.Set(name, value); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	klog.SetOutput(logFile)
	if cfg.profileDir != "" {
		if err := os.MkdirAll(cfg.profileDir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	pki, err := kubecluster.NewPKI(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	rd := &runDir{dir: dir, pki: pki}
	fmt.Printf("kube-load: %d nodes, %d pods, %v per cache, churn %.0f pods/s, %d round(s), %s first\n",
		cfg.nodes, cfg.pods, cfg.duration, cfg.churnRate, cfg.rounds, cacheLabel(cfg.first))
	failed := false
	var wks, ups []*result
	for round := range cfg.rounds {
		order := []string{cfg.first, other(cfg.first)}
		if round%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		results := map[string]*result{}
		for _, cache := range order {
			res, err := runCache(ctx, cfg, rd, cache, round)
			if err != nil {
				fmt.Printf("FAIL %s: %v\n", cacheLabel(cache), err)
				failed = true
				break
			}
			results[cache] = res
		}
		if results["watchkeeper"] == nil || results["upstream"] == nil {
			break
		}
		fmt.Println()
		if round > 0 || cfg.rounds > 1 {
			fmt.Printf("round %d of %d (%s first)\n", round+1, cfg.rounds, cacheLabel(order[0]))
		}
		printReport(os.Stdout, cfg, results["watchkeeper"], results["upstream"])
		wks, ups = append(wks, results["watchkeeper"]), append(ups, results["upstream"])
	}
	if len(wks) > 1 {
		fmt.Println()
		printPooled(os.Stdout, cfg, wks, ups)
	}
	fmt.Printf("kube-load took %v\n", time.Since(start).Round(time.Second))
	if failed {
		fmt.Println("kube-load: FAIL")
		return 1
	}
	fmt.Println("kube-load: ok")
	return 0
}

func other(cache string) string {
	if cache == "watchkeeper" {
		return "upstream"
	}
	return "watchkeeper"
}
