// Command readyz-restart measures how long kube-apiserver takes from a
// SIGTERM restart to /readyz, per watch cache, and which readiness checks
// hold it: etcd and one kube-apiserver (the binary of make kube-apiserver),
// filled with pods, secrets and events, a few hundred watching clients
// (kubelet-shaped per-node pod watches and per-object secret watches, and
// a few controller-shaped informers of whole resources) and a stream of
// writes, then a restart while /readyz?verbose is polled every 100ms. It
// prints, per restart, when the new process first answered and first
// answered 200, each check that failed in between and for how long, and
// the CPU time the new process had used when it was ready; for watchkeeper
// it also reads /debug/watchkeeper while its watch-caches check fails, to
// name the caches not ready. -profile-dir saves a 6s CPU profile of the new
// process from its first answer. A diagnostic of the restart miss in
// docs/kube-load.md, small enough to run beside other work:
//
//	go -C e2e run ./cmd/readyz-restart -kube-apiserver ../bin/kube-apiserver-watchkeeper
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/watchkeeper/watchkeeper/e2e/internal/kubecluster"
	"github.com/watchkeeper/watchkeeper/e2e/internal/restartprobe"
	"github.com/watchkeeper/watchkeeper/internal/childserver"
)

type config struct {
	binary     string
	decorators string
	pods       int
	secrets    int
	events     int
	nodes      int
	clients    int
	watchers   int
	churn      float64
	grace      time.Duration
	serverArgs string
	rounds     int
	keep       bool
	profileDir string
}

func main() {
	var cfg config
	flag.StringVar(&cfg.binary, "kube-apiserver", "bin/kube-apiserver-watchkeeper", "kube-apiserver on watchkeeper (make kube-apiserver)")
	flag.StringVar(&cfg.decorators, "decorators", "watchkeeper,upstream", "the caches to measure, in order")
	flag.IntVar(&cfg.pods, "pods", 3000, "pods, spread over -nodes (bound, never run)")
	flag.IntVar(&cfg.secrets, "secrets", 600, "secrets")
	flag.IntVar(&cfg.events, "events", 2000, "events (uncached by kube-apiserver)")
	flag.IntVar(&cfg.nodes, "nodes", 300, "node names the pods are bound to; one pod watch per node")
	flag.IntVar(&cfg.clients, "clients", 300, "watching clients: each a pod watch of one node (fieldSelector spec.nodeName) and a secret watch (metadata.name)")
	flag.IntVar(&cfg.watchers, "controllers", 3, "controller-shaped clients: each an informer of every pod, secret, namespace and serviceaccount")
	flag.Float64Var(&cfg.churn, "churn", 20, "pod and secret writes per second, all along")
	flag.DurationVar(&cfg.grace, "grace", 90*time.Second, "SIGKILL after this long after SIGTERM")
	flag.StringVar(&cfg.serverArgs, "server-args", "--shutdown-watch-termination-grace-period=5s", "more kube-apiserver flags, space separated")
	flag.IntVar(&cfg.rounds, "rounds", 1, "restarts per cache")
	flag.BoolVar(&cfg.keep, "keep", false, "keep the run's directory (logs)")
	flag.StringVar(&cfg.profileDir, "profile-dir", "", "save a CPU profile of kube-apiserver per restart here, 6s from its first answer")
	flag.Parse()
	kubecluster.Main(func(ctx context.Context) int { return run(ctx, cfg) }, &cfg.binary)
}

func run(ctx context.Context, cfg config) int {
	dir, done, err := kubecluster.RunDir("watchkeeper-readyz-restart-", cfg.keep)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer done()
	pki, err := kubecluster.NewPKI(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := 0
	for _, dec := range strings.Split(cfg.decorators, ",") {
		if err := measure(ctx, cfg, dir, pki, dec); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", dec, err)
			code = 1
		}
	}
	return code
}

func logf(dec, format string, args ...any) {
	fmt.Printf("[%s %s] %s\n", time.Now().UTC().Format("15:04:05.000"), dec, fmt.Sprintf(format, args...))
}

func measure(ctx context.Context, cfg config, dir string, pki *kubecluster.PKI, dec string) error {
	var args []string
	if cfg.serverArgs != "" {
		args = strings.Fields(cfg.serverArgs)
	}
	s, err := kubecluster.StartServer(ctx, dir, pki, kubecluster.ServerConfig{Name: "rr-" + dec, Binary: cfg.binary, Decorator: dec, Args: args})
	if err != nil {
		return err
	}
	defer s.Stop()
	logf(dec, "ready at %s, log %s", s.URL, s.KAS.LogPath)

	start := time.Now()
	if err := fill(ctx, s.Client, cfg); err != nil {
		return fmt.Errorf("fill: %w", err)
	}
	logf(dec, "filled %d pods, %d secrets, %d events in %v", cfg.pods, cfg.secrets, cfg.events, time.Since(start).Round(time.Millisecond))

	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	synced := startClients(runCtx, &wg, s.Admin, cfg)
	if err := waitSynced(ctx, synced, time.Minute); err != nil {
		return err
	}
	logf(dec, "%d clients synced", cfg.clients)
	var writes, writeErrs atomic.Int64
	wg.Add(1)
	go func() { defer wg.Done(); churn(runCtx, s.Client, cfg, &writes, &writeErrs) }()

	for round := 1; round <= cfg.rounds; round++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Second):
		}
		if err := restart(ctx, s, dec, round, cfg.grace, cfg.profileDir); err != nil {
			return err
		}
	}
	logf(dec, "%d writes, %d failed", writes.Load(), writeErrs.Load())
	return nil
}

// fill creates the objects in parallel.
func fill(ctx context.Context, c kubernetes.Interface, cfg config) error {
	const namespaces = 10
	for i := range namespaces {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("rr-%d", i)}}
		if _, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			return err
		}
		// No controller-manager here to make it; pods need it.
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
		if _, err := c.CoreV1().ServiceAccounts(ns.Name).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	type job func() error
	jobs := make(chan job)
	var (
		errOnce  sync.Once
		firstErr error
		failed   atomic.Bool
	)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				if failed.Load() {
					continue // drain: the first error is the answer
				}
				if err := j(); err != nil {
					errOnce.Do(func() { firstErr = err })
					failed.Store(true)
				}
			}
		}()
	}
	pad := strings.Repeat("x", 2000) // objects of a realistic size
	for i := range cfg.secrets {
		ns := fmt.Sprintf("rr-%d", i%namespaces)
		jobs <- func() error {
			sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("secret-%d", i)}, StringData: map[string]string{"k": pad}}
			_, err := c.CoreV1().Secrets(ns).Create(ctx, sec, metav1.CreateOptions{})
			return err
		}
	}
	for i := range cfg.pods {
		ns := fmt.Sprintf("rr-%d", i%namespaces)
		jobs <- func() error {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%d", i), Labels: map[string]string{"app": fmt.Sprintf("a%d", i%20)},
					Annotations: map[string]string{"pad": pad}},
				Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%d", i%cfg.nodes),
					Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
			}
			_, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
			return err
		}
	}
	for i := range cfg.events {
		ns := fmt.Sprintf("rr-%d", i%namespaces)
		jobs <- func() error {
			ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ev-%d", i)},
				InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: fmt.Sprintf("pod-%d", i)},
				Reason:         "Filled", Message: pad[:200], Type: corev1.EventTypeNormal}
			_, err := c.CoreV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{})
			return err
		}
	}
	close(jobs)
	wg.Wait()
	return firstErr
}

// startClients starts the watching clients, a client-go transport per 50
// of them, and returns their informers' HasSynced.
func startClients(ctx context.Context, wg *sync.WaitGroup, admin *rest.Config, cfg config) []cache.InformerSynced {
	var synced []cache.InformerSynced
	var client kubernetes.Interface
	for i := range cfg.clients {
		if i%50 == 0 {
			rc := rest.CopyConfig(admin)
			rc.QPS, rc.Burst = 50, 100
			rc.UserAgent = fmt.Sprintf("readyz-restart-%d", i/50)
			client = kubernetes.NewForConfigOrDie(rc)
		}
		c := client
		node := fmt.Sprintf("node-%d", i%cfg.nodes)
		podLW := cache.NewListWatchFromClient(c.CoreV1().RESTClient(), "pods", metav1.NamespaceAll, fields.OneTermEqualSelector("spec.nodeName", node))
		secLW := cache.NewListWatchFromClient(c.CoreV1().RESTClient(), "secrets", fmt.Sprintf("rr-%d", i%10),
			fields.OneTermEqualSelector("metadata.name", fmt.Sprintf("secret-%d", i%cfg.secrets)))
		for _, inf := range []cache.SharedIndexInformer{
			cache.NewSharedIndexInformer(podLW, &corev1.Pod{}, 0, cache.Indexers{}),
			cache.NewSharedIndexInformer(secLW, &corev1.Secret{}, 0, cache.Indexers{}),
		} {
			synced = append(synced, inf.HasSynced)
			wg.Add(1)
			go func() { defer wg.Done(); inf.RunWithContext(ctx) }()
		}
	}
	for i := range cfg.watchers {
		rc := rest.CopyConfig(admin)
		rc.QPS, rc.Burst = 50, 100
		rc.UserAgent = fmt.Sprintf("readyz-restart-controller-%d", i)
		c := kubernetes.NewForConfigOrDie(rc).CoreV1().RESTClient()
		for _, lw := range []struct {
			resource string
			obj      runtime.Object
		}{{"pods", &corev1.Pod{}}, {"secrets", &corev1.Secret{}}, {"namespaces", &corev1.Namespace{}}, {"serviceaccounts", &corev1.ServiceAccount{}}} {
			inf := cache.NewSharedIndexInformer(cache.NewListWatchFromClient(c, lw.resource, metav1.NamespaceAll, fields.Everything()), lw.obj, 0, cache.Indexers{})
			synced = append(synced, inf.HasSynced)
			wg.Add(1)
			go func() { defer wg.Done(); inf.RunWithContext(ctx) }()
		}
	}
	return synced
}

func waitSynced(ctx context.Context, synced []cache.InformerSynced, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		n := 0
		for _, s := range synced {
			if s() {
				n++
			}
		}
		if n == len(synced) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d informers synced after %v", n, len(synced), timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// churn patches pods and secrets at cfg.churn per second; errors (the
// restart) are counted and skipped.
func churn(ctx context.Context, c kubernetes.Interface, cfg config, writes, errs *atomic.Int64) {
	if cfg.churn <= 0 {
		return
	}
	t := time.NewTicker(time.Duration(float64(time.Second) / cfg.churn))
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"stamp":"%d"}}}`, time.Now().UnixNano())
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var err error
		if i%4 == 3 {
			n := i % cfg.secrets
			_, err = c.CoreV1().Secrets(fmt.Sprintf("rr-%d", n%10)).Patch(wctx, fmt.Sprintf("secret-%d", n), types.MergePatchType, patch, metav1.PatchOptions{})
		} else {
			n := i % cfg.pods
			_, err = c.CoreV1().Pods(fmt.Sprintf("rr-%d", n%10)).Patch(wctx, fmt.Sprintf("pod-%d", n), types.MergePatchType, patch, metav1.PatchOptions{})
		}
		cancel()
		writes.Add(1)
		if err != nil {
			errs.Add(1)
		}
	}
}

// restart SIGTERMs kube-apiserver, starts it again, and polls /readyz
// until it has been ready for 2s, then prints the timeline.
func restart(ctx context.Context, s *kubecluster.Server, dec string, round int, grace time.Duration, profileDir string) error {
	hc := *s.HTTP
	hc.Timeout = 3 * time.Second
	var readySince atomic.Int64
	profiled := make(chan struct{})
	var profiling atomic.Bool
	polls := 0
	pcfg := restartprobe.Config{Client: &hc, URL: s.URL, Interval: 100 * time.Millisecond}
	if dec == "watchkeeper" {
		pcfg.Detail = func(ctx context.Context, failed []string) []string {
			if !slices.Contains(failed, "watch-caches") {
				return nil
			}
			return notReadyCaches(ctx, &hc, s.URL)
		}
	}
	pcfg.Observe = func(p restartprobe.Poll) {
		polls++
		if profileDir != "" && !profiling.Load() && p.Status != 0 && p.Status != http.StatusOK && polls > 1 {
			profiling.Store(true)
			go func() {
				defer close(profiled)
				path := fmt.Sprintf("%s/%s-restart-%d.pprof", profileDir, dec, round)
				code, body, err := s.GetBytes(ctx, "/debug/pprof/profile?seconds=6", 30*time.Second)
				if err == nil && code == http.StatusOK {
					err = os.WriteFile(path, body, 0o644)
				}
				logf(dec, "cpu profile %s: %d %v", path, code, err)
			}()
		}
		if p.Status == http.StatusOK {
			readySince.CompareAndSwap(0, p.At.UnixNano())
		} else {
			readySince.Store(0)
		}
	}
	poller := restartprobe.Start(ctx, pcfg)
	sigterm := time.Now()
	exited, ready, err := s.Restart(ctx, grace)
	if err != nil {
		poller.Stop()
		return err
	}
	// The CPU the new process used until the driver's own wait saw it ready
	// (a 250ms poll): the work of starting, less sensitive than the wall
	// time to what else the machine runs.
	cpu, cpuErr := childserver.ProcCPUSeconds(s.KAS.PID())
	for {
		if r := readySince.Load(); r != 0 && time.Since(time.Unix(0, r)) > 2*time.Second {
			break
		}
		if ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	tl := restartprobe.Analyze(poller.Stop(), exited)
	if profiling.Load() {
		select {
		case <-profiled:
		case <-time.After(30 * time.Second):
		}
	}
	report(dec, round, sigterm, exited, ready, tl)
	if cpuErr != nil {
		logf(dec, "restart %d: the new kube-apiserver's CPU: %v", round, cpuErr)
	} else {
		logf(dec, "restart %d: the new kube-apiserver's CPU (user+system) when ready: %.2fs", round, cpu)
	}
	return nil
}

// notReadyCaches reads /debug/watchkeeper for the caches not ready.
func notReadyCaches(ctx context.Context, hc *http.Client, url string) []string {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/debug/watchkeeper?format=json", nil)
	resp, err := hc.Do(req)
	if err != nil {
		return []string{"(debug view: " + err.Error() + ")"}
	}
	defer resp.Body.Close()
	var page struct {
		Resources []struct {
			Group, Resource string
			Ready           bool
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		return []string{"(debug view: " + err.Error() + ")"}
	}
	var out []string
	for _, r := range page.Resources {
		if !r.Ready {
			out = append(out, strings.TrimSuffix(r.Resource+"."+r.Group, "."))
		}
	}
	if len(page.Resources) == 0 {
		out = append(out, "(no caches yet)")
	}
	return out
}

func report(dec string, round int, sigterm, exited, ready time.Time, tl restartprobe.Timeline) {
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }
	logf(dec, "restart %d: exited %v after SIGTERM; first answer %v after the exit, first 200 %v (the driver's wait: %v); slowest /readyz answer until ready %v",
		round, r(exited.Sub(sigterm)), r(tl.FirstAnswer), r(tl.Ready), r(ready.Sub(exited)), tl.Slowest.Round(time.Millisecond))
	logf(dec, "restart %d: %s", round, tl.Summary())
	printChecks(dec, "check failing", tl.Checks)
	printChecks(dec, "cache not ready", tl.Details)
}

// printChecks prints each check, the last to pass first, with the times
// after the exit.
func printChecks(dec, what string, checks []restartprobe.Check) {
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }
	for _, c := range checks {
		still := ""
		if c.StillFailing {
			still = " (still failing at the last answer)"
		}
		logf(dec, "  %s %-60s from %8v, passed at %8v, failing %8v%s", what, c.Name, r(c.FirstFailed), r(c.Passed), r(c.Failed), still)
	}
}
