// Command e2e runs the sample apiserver aggregated behind a real
// kube-apiserver, on loopback, and checks it through kube-apiserver only,
// with kubectl and client-go: `make e2e`. It prints one line per step (PASS
// or FAIL with its figure) and a closing "e2e: N passed, N failed" line;
// it exits non-zero if any step failed.
//
// It starts two etcd members in its own process (internal/etcdlaunch), then
// kube-apiserver and the sample apiserver as children, all in a temporary
// directory that it removes at the end (-keep keeps it). Every child is
// stopped on exit, on failure and on Ctrl-C; if the driver itself is
// killed, the kernel kills them (Pdeathsig).
//
// With -hold it sets everything up, prints how to reach it with kubectl and
// waits for Ctrl-C: docs/aggregated.md's transcript was made that way.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/watchkeeper/watchkeeper/e2e/internal/kubecluster"
	"github.com/watchkeeper/watchkeeper/internal/freeport"
)

type config struct {
	kubeAPIServer, kubectl, sample string
	deployDir                      string
	bookmarkFrequency              time.Duration
	keep, hold                     bool
}

func main() {
	var cfg config
	flag.StringVar(&cfg.kubeAPIServer, "kube-apiserver", "bin/kube-apiserver", "the kube-apiserver binary")
	flag.StringVar(&cfg.kubectl, "kubectl", "bin/kubectl", "the kubectl binary")
	flag.StringVar(&cfg.sample, "sample-apiserver", "bin/sample-apiserver", "the sample apiserver binary")
	flag.StringVar(&cfg.deployDir, "deploy", "sample-apiserver/deploy", "the sample apiserver's manifests")
	flag.DurationVar(&cfg.bookmarkFrequency, "bookmark-frequency", 2*time.Second, "the sample apiserver's --watch-cache-bookmark-frequency")
	flag.BoolVar(&cfg.keep, "keep", false, "keep the run's directory (certificates, kubeconfigs, logs, etcd data)")
	flag.BoolVar(&cfg.hold, "hold", false, "set up, print how to use the cluster, and wait for Ctrl-C instead of running the checks")
	flag.Parse()
	kubecluster.Main(func(ctx context.Context) int { return run(ctx, cfg) },
		&cfg.kubeAPIServer, &cfg.kubectl, &cfg.sample, &cfg.deployDir)
}

func run(ctx context.Context, cfg config) int {
	start := time.Now()
	dir, err := os.MkdirTemp("", "watchkeeper-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c := &cluster{dir: dir, cfg: cfg}
	r := &kubecluster.Report{}
	defer func() {
		c.stop()
		if r.Failed > 0 {
			for _, ch := range []*kubecluster.Child{c.kas, c.sample} {
				if ch != nil {
					fmt.Printf("--- end of %s\n%s\n", ch.LogPath, ch.LogTail())
				}
			}
		}
		if cfg.keep {
			fmt.Println("kept", dir)
		} else {
			os.RemoveAll(dir)
		}
	}()

	if !c.setup(ctx, r) {
		r.Close(start)
		return 1
	}
	if cfg.hold {
		fmt.Printf("\nready; the sample apiserver serves https://127.0.0.1:%d behind kube-apiserver %s\n", c.samplePort, c.kasURL)
		fmt.Printf("  export KUBECONFIG=%s\n  kubectl api-resources --api-group=demo.watchkeeper.io\n", c.adminKubeconfig)
		fmt.Printf("a user with no rights yet (make e2e binds it get-only on widgets): kubectl --kubeconfig=%s ...\n", c.getterKubeconfig)
		fmt.Printf("the sample apiserver (pid %d) was started as (to restart it by hand after a kill):\n  %s %s\n",
			c.sample.PID(), c.cfg.sample, strings.Join(c.sampleArgs(), " "))
		fmt.Println("Ctrl-C stops everything and removes", dir)
		<-ctx.Done()
		fmt.Println()
		return 0
	}
	c.checks(ctx, r)
	return r.Close(start)
}

// setup brings the cluster up; each part is a step. It returns false when
// a step failed, and nothing after it can run.
func (c *cluster) setup(ctx context.Context, r *kubecluster.Report) bool {
	return r.Step("setup: certificates", func() (string, error) {
		var err error
		c.pki, err = kubecluster.NewPKI(c.dir)
		return "cluster CA, serving cert, front-proxy CA and client cert, service-account key, admin and getter client certs", err
	}) && r.Step("setup: etcd", func() (string, error) {
		if err := c.startEtcd(); err != nil {
			return "", err
		}
		return fmt.Sprintf("kube-apiserver's %s, the sample's %s", c.kubeEtcd.Endpoint(), c.sampleEtcd.Endpoint()), nil
	}) && r.Step("setup: kube-apiserver ready", func() (string, error) {
		if err := c.startKubeAPIServer(ctx); err != nil {
			return "", err
		}
		return fmt.Sprintf("%s, pid %d", c.kasURL, c.kas.PID()), nil
	}) && r.Step("setup: deploy/ namespace and RBAC applied", func() (string, error) {
		out, err := c.kubectl(ctx, c.adminKubeconfig, "apply",
			"-f", filepath.Join(c.cfg.deployDir, "namespace.yaml"), "-f", filepath.Join(c.cfg.deployDir, "rbac.yaml"))
		return kubecluster.OneLine(out), err
	}) && r.Step("setup: sample apiserver's service-account token", func() (string, error) {
		return c.writeSampleKubeconfig(ctx)
	}) && r.Step("setup: sample apiserver ready (aggregated)", func() (string, error) {
		port, err := freeport.Port()
		if err != nil {
			return "", err
		}
		c.samplePort = port
		if err := c.startSample(ctx); err != nil {
			return "", err
		}
		return fmt.Sprintf("%s, pid %d, --watch-cache-bookmark-frequency=%v", c.sampleURL(), c.sample.PID(), c.cfg.bookmarkFrequency), nil
	}) && r.Step("setup: Service and deploy/ APIService applied", func() (string, error) {
		return c.registerService(ctx)
	})
}
