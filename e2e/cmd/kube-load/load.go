package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/watchkeeper/watchkeeper/e2e/internal/kubecluster"
	"github.com/watchkeeper/watchkeeper/e2e/internal/restartprobe"
	"github.com/watchkeeper/watchkeeper/internal/childserver"
)

// result is what one cache's run measured.
type result struct {
	cache    string
	measured time.Duration
	st       *stats
	tracker  *podTracker
	acc      scraped // the increase of the scraped series over the measured run
	// The same increase split by phase (acc is their sum), and how long
	// each phase lasted, summed.
	byPhase   [nAPIPhases]scraped
	phaseTook [nAPIPhases]time.Duration
	cpu       time.Duration // kube-apiserver's, cpuByPhase and cpuShutdown summed
	// kube-apiserver's CPU in each phase: the restart's is the new
	// process's, from its start; cpuShutdown is the old process's from
	// the SIGTERM to its exit (its drain of the watches).
	cpuByPhase  [nAPIPhases]time.Duration
	cpuShutdown time.Duration
	peakRSS     int64
	// rssPeaks is kube-apiserver's peak RSS (VmHWM) as it stood at the
	// measured run's start (the ramp) and at the restart, and the
	// restarted process's: which part of the run set peakRSS.
	rssPeaks [3]int64
	// The machine's CPU over the run: every process's and the host's
	// steal (host), and of it the run's other processes' (kube-load
	// itself with etcd, the controllers, kwok); the rest is someone
	// else's.
	host       hostTimes
	helpersCPU time.Duration
	heap       heapUse
	prof       profiles

	podStamps, objStamps, writeErrors, churnErrors atomic.Int64

	stormSync     []time.Duration // per kubelet: storm start to its WatchList synced
	stormUnsynced int
	restartDown   time.Duration // SIGTERM to ready
	// /readyz?verbose polled from the SIGTERM until ready, relative to
	// the old process's exit; and the new process's CPU when the
	// driver's wait saw it ready.
	restartReadyz restartprobe.Timeline
	restartCPU    time.Duration
	admissionWait admissionWait   // goroutine profiles of the new process (-profile-dir)
	reconnect     []time.Duration // per kubelet: the old process's exit to its pods' watch open again
	unreconnected int
	consistency   string // the kubelets' views against the server's pods at the end
	consistent    bool
}

// load is one cache's run: its cluster, kubelets, workload and timeline.
type load struct {
	cfg     config
	rd      *runDir
	cache   string
	name    string // the cluster's, unique in the run directory
	cluster *kubecluster.Cluster
	res     *result
	kubes   []*kubelet
	work    *workload
	say     func(format string, args ...any)
}

// runCache runs one cache in round (from 0) on a fresh etcd and cluster.
func runCache(ctx context.Context, cfg config, rd *runDir, cache string, round int) (*result, error) {
	st := &stats{}
	l := &load{cfg: cfg, rd: rd, cache: cache, name: fmt.Sprintf("load-%d-%s", round+1, cache), res: &result{cache: cache, st: st, tracker: newPodTracker(st)}}
	start := time.Now()
	l.say = func(format string, args ...any) {
		fmt.Printf("[%s %6.1fs] %s\n", cacheLabel(cache), time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	if err := l.setUp(ctx); err != nil {
		if l.cluster != nil {
			l.cluster.Stop()
		}
		return nil, err
	}
	defer l.cluster.Stop()
	kctx, stopClients := context.WithCancel(ctx)
	var clients sync.WaitGroup
	defer func() {
		stopClients()
		for _, k := range l.kubes {
			k.wait()
		}
		clients.Wait()
	}()
	if err := l.startClients(kctx, &clients); err != nil {
		return nil, err
	}
	if err := l.measure(ctx); err != nil {
		return nil, err
	}
	l.checkViews(ctx)
	return l.res, nil
}

func cacheLabel(cache string) string {
	if cache == "upstream" {
		return "stock"
	}
	return cache
}

// decorator is the --watch-cache-decorator of l's server: its cache's, or
// the stock one in both columns of an A/A run.
func (l *load) decorator() string {
	if l.cfg.calibrate {
		return "upstream"
	}
	return l.cache
}

// setUp starts the cluster with its nodes.
func (l *load) setUp(ctx context.Context) error {
	args := []string{
		// Both caches' servers end their watches within seconds of a
		// SIGTERM (stock kube-apiserver otherwise waits 60s for them),
		// as docs/kube-apiserver.md advises adopters.
		"--shutdown-watch-termination-grace-period=5s",
	}
	args = append(args, strings.Fields(l.cfg.serverArgs)...)
	decorator := l.decorator()
	if decorator == "watchkeeper" {
		args = append(args, strings.Fields(l.cfg.watchkeeperArgs)...)
	}
	start := time.Now()
	var err error
	l.cluster, err = kubecluster.StartCluster(ctx, l.rd.dir, l.rd.pki, kubecluster.ClusterConfig{
		KubeAPIServer:     l.cfg.kubeAPIServer,
		ControllerManager: l.cfg.controllerManager,
		Scheduler:         l.cfg.scheduler,
		Kwok:              l.cfg.kwok,
		KwokStagesDir:     l.cfg.kwokStages,
		// Nodes initialized once; pods Running at once, and deleted once
		// they have a deletion timestamp. No heartbeat stage and no kwok
		// leases (KwokNodeLeaseSeconds 0): the simulated kubelets renew the
		// leases and report node status, so kwok and they never write the
		// same objects.
		KwokStages: []string{
			"node/fast/node-initialize.yaml",
			"pod/fast/pod-ready.yaml",
			"pod/fast/pod-complete.yaml",
			"pod/fast/pod-delete.yaml",
		},
		ServerArgs: args,
		// The churn's pods are created and deleted by the replicaset
		// controller and bound by the scheduler (an event each): their
		// default 20 and 50 QPS would cap the churn and the start.
		ControllerManagerArgs: []string{"--kube-api-qps=200", "--kube-api-burst=400"},
		SchedulerArgs:         []string{"--kube-api-qps=200", "--kube-api-burst=400"},
	}, l.name, decorator)
	if err != nil {
		return err
	}
	l.say("kube-apiserver (--watch-cache-decorator=%s) %s, controller-manager, scheduler, kwok up in %v",
		decorator, l.cluster.URL, time.Since(start).Round(100*time.Millisecond))
	start = time.Now()
	nodes := make([]*corev1.Node, l.cfg.nodes)
	for i := range nodes {
		nodes[i] = kubecluster.FakeNode(nodeName(i), map[string]string{groupLabel: groupName(groupOf(i))})
	}
	if err := l.cluster.AddNodes(ctx, nodes, 2*time.Minute+time.Duration(l.cfg.nodes)*100*time.Millisecond); err != nil {
		return err
	}
	l.say("%d nodes Ready in %v", l.cfg.nodes, time.Since(start).Round(100*time.Millisecond))
	return nil
}

// startClients starts a kubelet per node, the driver's pod informer, and
// the workload, and waits until its pods are Running and every kubelet's
// WatchList synced.
func (l *load) startClients(ctx context.Context, wg *sync.WaitGroup) error {
	start := time.Now()
	base := &rest.Config{Host: l.cluster.URL, TLSClientConfig: rest.TLSClientConfig{CAFile: l.rd.pki.Path("ca.crt")}}
	for i := range l.cfg.nodes {
		name := nodeName(i)
		cert, key, err := l.rd.pki.ClientCert("system:node:"+name, []string{"system:nodes"})
		if err != nil {
			return err
		}
		k, err := newKubelet(base, name, cert, key, l.res.st)
		if err != nil {
			return err
		}
		l.kubes = append(l.kubes, k)
		k.run(ctx)
	}
	driver := rest.CopyConfig(l.cluster.Admin)
	driver.ContentType = runtime.ContentTypeProtobuf
	driver.AcceptContentTypes = kubeletProtobufAccept
	client, err := kubernetes.NewForConfig(driver)
	if err != nil {
		return err
	}
	l.res.tracker.run(ctx, client, wg)
	l.work = newWorkload(client, l.cfg.nodes, l.cfg.pods)
	if err := l.work.create(ctx); err != nil {
		return fmt.Errorf("workload: %w", err)
	}
	timeout := 3*time.Minute + time.Duration(l.cfg.pods)*100*time.Millisecond
	if err := waitFor(ctx, timeout, func() (bool, error) {
		return l.res.tracker.runningCount() >= l.cfg.pods, l.cluster.CheckControllers()
	}); err != nil {
		return fmt.Errorf("%d of %d pods Running: %w", l.res.tracker.runningCount(), l.cfg.pods, err)
	}
	if err := waitFor(ctx, 2*time.Minute, func() (bool, error) {
		for _, k := range l.kubes {
			if synced, _ := k.syncTimes(); synced.IsZero() {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return fmt.Errorf("kubelets' WatchLists: %w", err)
	}
	l.say("%d kubelets watching, %d deployments in %d namespaces, %d pods Running, in %v",
		len(l.kubes), l.work.deployments(), l.work.groups, l.cfg.pods, time.Since(start).Round(100*time.Millisecond))
	return nil
}

// measure runs the measured part: churn and stamps for cfg.duration, the
// start storm at a third, the kube-apiserver restart at two thirds.
func (l *load) measure(ctx context.Context) error {
	res, st, cfg := l.res, l.res.st, l.cfg
	m0, err := scrape(ctx, l.cluster.Server)
	if err != nil {
		return err
	}
	u0, err := readProc(l.cluster.KAS.PID())
	if err != nil {
		return err
	}
	res.rssPeaks[0] = u0.peakRSS
	h0, err := hostCPU()
	if err != nil {
		return err
	}
	helpers0, err := cpuOf(l.helperPIDs()...)
	if err != nil {
		return err
	}
	st.phase.Store(int32(phaseSteady))
	t0 := time.Now()
	// The API call latency by phase: a scrape at every boundary closes
	// the span before it.
	phases := newPhased(t0, m0)
	mark := func(ph apiPhase) error {
		now := time.Now()
		s, err := scrape(ctx, l.cluster.Server)
		if err != nil {
			return fmt.Errorf("/metrics at the end of a %s span: %w", ph, err)
		}
		phases.mark(now, s, ph)
		return nil
	}
	wctx, stopWork := context.WithCancel(ctx)
	var work sync.WaitGroup
	work.Go(func() { l.work.churn(wctx, cfg.churnRate, &res.churnErrors) })
	work.Go(func() { l.work.stampObjects(wctx, cfg.objectStamps, &res.objStamps, &res.writeErrors) })
	driverClient := l.work.client
	work.Go(func() { stampPods(wctx, driverClient, res.tracker, cfg.podStamps, &res.podStamps, &res.writeErrors) })
	defer func() {
		stopWork()
		work.Wait()
	}()
	l.say("measuring for %v: churn %.0f pods/s, %.0f pod and %.0f secret/configmap stamps/s; start storm at %v, kube-apiserver restart at %v",
		cfg.duration, cfg.churnRate, cfg.podStamps, cfg.objectStamps, cfg.duration/3, 2*cfg.duration/3)

	at := func(d time.Duration) <-chan time.Time { return time.After(time.Until(t0.Add(d))) }
	if cfg.profileDir != "" {
		work.Go(func() { l.cpuProfile(wctx, cfg.duration/12, min(30*time.Second, cfg.duration/6)) })
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-at(cfg.duration/3 - 5*time.Second):
	}
	l.heapProfile(ctx)

	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-at(cfg.duration / 3):
	}
	if err := mark(apiSteady); err != nil {
		return err
	}
	uSteady, err := readProc(l.cluster.KAS.PID())
	if err != nil {
		return err
	}
	res.cpuByPhase[apiSteady] = uSteady.cpu - u0.cpu
	// The storm's span runs until the restart: the same third of the run
	// on both caches, the storm's aftermath included. Ended at the last
	// WatchList's sync, a cache that synced sooner would have the
	// aftermath counted as its steady phase.
	st.storm.Store(true)
	l.storm(ctx)

	last := apiStorm // the phase the run's last span is in
	if cfg.restart {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-at(2 * cfg.duration / 3):
		}
		st.storm.Store(false)
		if err := mark(apiStorm); err != nil {
			return err
		}
		u1, err := readProc(l.cluster.KAS.PID())
		if err != nil {
			return err
		}
		res.cpuByPhase[apiStorm] = u1.cpu - uSteady.cpu
		res.peakRSS = u1.peakRSS
		res.rssPeaks[1] = u1.peakRSS
		u0 = procUsage{}
		phases.replaced()
		old := l.cluster.KAS
		if err := l.restart(ctx, func() {
			if cfg.profileDir != "" {
				work.Go(func() { l.restartProfile(wctx) })
				work.Go(func() { l.sampleAdmissionWait(wctx, time.Second, 40*time.Second) })
			}
		}); err != nil {
			return err
		}
		res.cpuShutdown = max(0, old.CPU()-u1.cpu)
		// The restart's span runs until the run's end, as the storm's
		// runs until the restart: the same third of the run on both
		// caches, the aftermath included. Ended 30s after ready (until
		// b672e43), the rest of the run counted as steady on the cache
		// that was ready sooner, its aftermath with it.
		last = apiRestart
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-at(cfg.duration):
	}
	stopWork()
	work.Wait()
	res.measured = time.Since(t0)
	st.phase.Store(int32(phaseRamp)) // what follows is not measured
	st.storm.Store(false)
	if err := mark(last); err != nil {
		return err
	}
	u2, err := readProc(l.cluster.KAS.PID())
	if err != nil {
		return err
	}
	h2, err := hostCPU()
	if err != nil {
		return err
	}
	helpers2, err := cpuOf(l.helperPIDs()...)
	if err != nil {
		return err
	}
	res.host, res.helpersCPU = h2.sub(h0), helpers2-helpers0
	res.acc, res.byPhase, res.phaseTook = phases.total(), phases.inc, phases.took
	if cfg.restart {
		res.cpuByPhase[apiRestart] = u2.cpu
	} else {
		res.cpuByPhase[apiStorm] = u2.cpu - uSteady.cpu
	}
	res.cpu = res.cpuShutdown
	for _, c := range res.cpuByPhase {
		res.cpu += c
	}
	res.peakRSS = max(res.peakRSS, u2.peakRSS)
	if cfg.restart {
		res.rssPeaks[2] = u2.peakRSS
	} else {
		res.rssPeaks[1] = u2.peakRSS
	}
	l.say("measured %v: kube-apiserver %v CPU, peak RSS %d MiB; API calls' phases: steady %v, storm %v, restart %v",
		res.measured.Round(time.Second), res.cpu.Round(100*time.Millisecond), res.peakRSS>>20,
		res.phaseTook[apiSteady].Round(100*time.Millisecond), res.phaseTook[apiStorm].Round(100*time.Millisecond), res.phaseTook[apiRestart].Round(100*time.Millisecond))
	return nil
}

// helperPIDs are the run's processes other than kube-apiserver: this one
// (the load and etcd) and the controllers.
func (l *load) helperPIDs() []int {
	pids := []int{os.Getpid()}
	for _, c := range l.cluster.Controllers {
		pids = append(pids, c.PID())
	}
	return pids
}

// storm restarts every kubelet's watches at once and waits until each
// kubelet's new WatchList of pods synced.
func (l *load) storm(ctx context.Context) {
	start := time.Now()
	for _, k := range l.kubes {
		k.restartWatches()
	}
	l.res.stormSync, l.res.stormUnsynced = l.waitKubelets(ctx, start, func(synced, _ time.Time) time.Time { return synced })
	l.say("start storm: %d kubelets' WatchLists restarted at once, %d synced, the last after %v",
		len(l.kubes), len(l.res.stormSync), lastOf(l.res.stormSync).Round(10*time.Millisecond))
}

// waitKubelets waits up to 2 minutes until, for every kubelet, at (of
// its pods' latest WatchList sync and latest watch call) is after since;
// it returns those kubelets' at-since, sorted, and how many never got
// there.
func (l *load) waitKubelets(ctx context.Context, since time.Time, at func(synced, watchOK time.Time) time.Time) ([]time.Duration, int) {
	when := func(k *kubelet) time.Time {
		synced, watchOK := k.syncTimes()
		return at(synced, watchOK)
	}
	_ = waitFor(ctx, 2*time.Minute, func() (bool, error) {
		for _, k := range l.kubes {
			if !when(k).After(since) {
				return false, nil
			}
		}
		return true, nil
	})
	var got []time.Duration
	missing := 0
	for _, k := range l.kubes {
		if t := when(k); t.After(since) {
			got = append(got, t.Sub(since))
		} else {
			missing++
		}
	}
	sortDurations(got)
	return got, missing
}

// restart restarts kube-apiserver (SIGTERM) and waits until every kubelet
// watches its pods again.
func (l *load) restart(ctx context.Context, started func()) error {
	st := l.res.st
	st.phase.Store(int32(phaseRestart))
	hc := *l.cluster.HTTP
	hc.Timeout = 3 * time.Second
	var lastOK atomic.Int64 // the latest 200's send time, UnixNano
	poller := restartprobe.Start(ctx, restartprobe.Config{Client: &hc, URL: l.cluster.URL, Interval: 100 * time.Millisecond,
		Observe: func(p restartprobe.Poll) {
			if p.Status == http.StatusOK {
				lastOK.Store(p.At.UnixNano())
			}
		}})
	start := time.Now()
	exited, ready, err := l.cluster.RestartNotify(ctx, 70*time.Second, started)
	if err != nil {
		poller.Stop()
		return fmt.Errorf("kube-apiserver restart: %w", err)
	}
	// The new process's CPU from its start to ready (as the cluster's
	// wait saw it, a 250ms poll): its work of starting.
	cpu, cpuErr := childserver.ProcCPUSeconds(l.cluster.KAS.PID())
	l.res.restartDown = ready.Sub(start)
	l.res.restartCPU = time.Duration(cpu * float64(time.Second))
	// The poller's own 200 from the new process, if the cluster's wait
	// saw one first.
	_ = waitFor(ctx, 5*time.Second, func() (bool, error) { return lastOK.Load() >= exited.UnixNano(), nil })
	l.res.restartReadyz = restartprobe.Analyze(poller.Stop(), exited)
	cpuNote := fmt.Sprintf("the new process's CPU to ready %.1fs", cpu)
	if cpuErr != nil {
		cpuNote = fmt.Sprintf("the new process's CPU: %v", cpuErr)
	}
	l.say("kube-apiserver restart: %s; %s", l.res.restartReadyz.Summary(), cpuNote)
	l.res.reconnect, l.res.unreconnected = l.waitKubelets(ctx, exited, func(_, watchOK time.Time) time.Time { return watchOK })
	l.say("kube-apiserver restarted: exited %v after SIGTERM, ready %v after; %d kubelets watching again, the last %v after the exit",
		exited.Sub(start).Round(100*time.Millisecond), ready.Sub(exited).Round(100*time.Millisecond),
		len(l.res.reconnect), lastOf(l.res.reconnect).Round(10*time.Millisecond))
	return nil
}

// viewsTimeout is how long the kubelets have, after the measured run, to
// show views consistent with the server's.
const viewsTimeout = 60 * time.Second

// checkViews waits until every kubelet's view of its pods is consistent
// with the server's (views.go: judged between two consistent lists, while
// writes go on), or viewsTimeout passes: an event lost on a watch leaves a
// view wrong, or behind, for good.
func (l *load) checkViews(ctx context.Context) {
	start := time.Now()
	pending := map[string]*kubelet{}
	for _, k := range l.kubes {
		pending[k.name] = k
	}
	type problem struct {
		verdict viewVerdict
		why     string
	}
	problems := map[string]problem{}
	var before *podList
	var views map[string]kubeletView // read after before
	lists := 0
	listErr := ""
	err := waitFor(ctx, viewsTimeout, func() (bool, error) {
		after, err := l.listPods(ctx)
		if err != nil {
			listErr = err.Error()
			return false, nil
		}
		lists++
		if before != nil {
			for name, v := range views {
				verdict, why := compareView(name, v, before, after)
				if verdict == viewConsistent {
					delete(pending, name)
					delete(problems, name)
				} else {
					problems[name] = problem{verdict, why}
				}
			}
		}
		if len(pending) == 0 {
			return true, nil
		}
		views = map[string]kubeletView{}
		for name, k := range pending {
			v, err := k.podsView()
			if err != nil {
				problems[name] = problem{viewWrong, err.Error()}
				continue
			}
			views[name] = v
		}
		before = after
		return false, nil
	})
	took := time.Since(start).Round(100 * time.Millisecond)
	l.res.consistent = err == nil
	if err == nil {
		l.res.consistency = fmt.Sprintf("every kubelet's pods consistent with the server's (%d kubelets), after %v (%d lists)", len(l.kubes), took, lists)
	} else {
		var wrong, behind []string
		for _, name := range sortedKeys(pending) {
			p, ok := problems[name]
			switch {
			case !ok:
				behind = append(behind, name+": not judged yet")
			case p.verdict == viewWrong:
				wrong = append(wrong, name+": "+p.why)
			default:
				behind = append(behind, name+": "+p.why)
			}
		}
		l.res.consistency = fmt.Sprintf("after %v (%d lists): %d kubelets wrong, %d behind", took, lists, len(wrong), len(behind))
		if all := append(wrong, behind...); len(all) > 0 {
			l.res.consistency += ", e.g. " + all[0]
		}
		if len(pending) == 0 {
			l.res.consistency += ": " + err.Error()
		}
		if listErr != "" {
			l.res.consistency += "; last list error: " + listErr
		}
	}
	l.say("views: %s", l.res.consistency)
}

// listPods is a consistent list of every pod, by namespace/name.
func (l *load) listPods(ctx context.Context) (*podList, error) {
	list, err := l.cluster.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	rv, err := parseRV(list.ResourceVersion)
	if err != nil {
		return nil, fmt.Errorf("the list's resourceVersion: %w", err)
	}
	out := newPodList(rv)
	for _, p := range list.Items {
		prv, err := parseRV(p.ResourceVersion)
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", p.Namespace, p.Name, err)
		}
		out.add(p.Namespace+"/"+p.Name, p.Spec.NodeName, prv)
	}
	return out, nil
}

func (l *load) cpuProfile(ctx context.Context, after, window time.Duration) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(after):
	}
	selfDone := make(chan struct{})
	go func() {
		defer close(selfDone)
		l.selfCPUProfile(ctx, window)
	}()
	defer func() { <-selfDone }()
	path, err := l.saveCPUProfile(ctx, window, "cpu")
	if err != nil {
		l.say("cpu profile: %v", err)
		return
	}
	l.res.prof.cpuPath = path
	l.say("cpu profile of %v: %s", window, path)
}

// selfCPUProfile profiles this process over the same window as
// kube-apiserver's: it runs etcd and every simulated kubelet, so etcd's
// latency in a phase is this process's CPU as much as etcd's work.
func (l *load) selfCPUProfile(ctx context.Context, window time.Duration) {
	path := filepath.Join(l.cfg.profileDir, l.name+"-load-cpu.pprof")
	f, err := os.Create(path)
	if err != nil {
		l.say("kube-load's cpu profile: %v", err)
		return
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		l.say("kube-load's cpu profile: %v", err)
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(window):
	}
	pprof.StopCPUProfile()
	l.say("kube-load's own cpu profile (etcd and the kubelets) of %v: %s", window, path)
}

// restartProfileWindow is how long the restart's CPU profile runs from the
// new process's first answer: its start, and 30s after ready on a small
// cluster.
const restartProfileWindow = 35 * time.Second

// restartProfile profiles the new kube-apiserver's CPU from the first
// moment its profile endpoint answers, which is before it is ready: the
// API calls of the restart phase are served from then on.
func (l *load) restartProfile(ctx context.Context) {
	var path string
	var last error
	err := waitFor(ctx, time.Minute, func() (bool, error) {
		path, last = l.saveCPUProfile(ctx, restartProfileWindow, "restart-cpu")
		return last == nil, nil
	})
	if err != nil {
		l.say("restart cpu profile: %v; the last try: %v", err, last)
		return
	}
	l.res.prof.restartCPUPath = path
	l.say("restart cpu profile of %v from the new process's first answer: %s", restartProfileWindow, path)
}

// saveCPUProfile takes a CPU profile of kube-apiserver over window and
// saves it as <cluster>-<kind>.pprof in the profile directory.
func (l *load) saveCPUProfile(ctx context.Context, window time.Duration, kind string) (string, error) {
	data, err := fetchProfile(ctx, l.cluster.Server, fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(window.Seconds())), window+time.Minute)
	if err != nil {
		return "", err
	}
	path := filepath.Join(l.cfg.profileDir, l.name+"-"+kind+".pprof")
	return path, os.WriteFile(path, data, 0o644)
}

func (l *load) heapProfile(ctx context.Context) {
	data, err := fetchProfile(ctx, l.cluster.Server, "/debug/pprof/heap?gc=1", 2*time.Minute)
	if err != nil {
		l.say("heap profile: %v", err)
		return
	}
	if l.res.heap, err = heapOf(data); err != nil {
		l.say("heap profile: %v", err)
		return
	}
	l.say("heap in use %d MiB, of it the caches' %d MiB", l.res.heap.total>>20, l.res.heap.caches>>20)
	if l.cfg.profileDir == "" {
		return
	}
	path := filepath.Join(l.cfg.profileDir, l.name+"-heap.pprof")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		l.say("heap profile: %v", err)
		return
	}
	l.res.prof.heapPath = path
}

func sortDurations(d []time.Duration) { sort.Slice(d, func(i, j int) bool { return d[i] < d[j] }) }

func lastOf(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[len(d)-1]
}

// quantileOf is the nearest-rank q-quantile of sorted d.
func quantileOf(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := int(q*float64(len(d))+0.999999) - 1
	return d[min(max(i, 0), len(d)-1)]
}
