// Command soak is watchkeeper's bounded soak (make soak): the sample
// apiserver with watchkeeper as its watch cache, on an etcd that is
// restarted and compacted while writers create, update and delete widgets
// and thousands of watchers with label and field selectors follow them:
// plain watches that resume from their last event or bookmark whenever a
// stream ends (and list again on 410), and client-go shared informers,
// whose reflectors use WatchList. At the end a checker compares every
// watcher's record with etcd's history, recorded live by a watch of its own
// (check.go says what counts as lost, duplicated and unexpected), and the
// soak prints one line of figures. It exits non-zero when anything was
// lost, duplicated or unexpected, or a watcher did not catch up.
//
// The etcd members run as child processes of this binary (its "etcd"
// subcommand, restarted on the same ports and data), so a kill is a real
// SIGKILL and a member's crash takes only its own process; the sample
// apiserver runs as a child process too (its "serve" subcommand), so its
// memory and goroutines are its own.
//
// -decorator upstream runs the same workload against k8s.io/apiserver's own
// cache (--watch-cache-decorator=upstream), for figures side by side: 410s
// (all, and those answering a resume after a stream ended), client relists,
// the caches' own relists (apiserver_watch_cache_initializations_total past
// each process's first), watches a cache terminated
// (apiserver_terminated_watchers_total) and streams that ended before their
// timeout without a 410 (the server ended them, or the connection broke).
//
// -replicas 3 -etcd-members 3 is the shape operators run (ha.go): a 3-member
// etcd cluster of child processes and three sample apiserver children over it.
// Each client talks to one replica and, when its connection breaks, resumes
// on the next from its last event or bookmark; a replica being stopped or
// down is out of the rotation, as behind a load balancer. Faults come on a
// fixed clock: a replica killed (kill -9), a replica stopped with SIGTERM
// (its stop time is measured) and started again, etcd's leader killed, a
// follower stopped; compactions as in the single shape.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/anishathalye/porcupine"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apiserver/pkg/storage/etcd3"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/watchkeeper/watchkeeper/internal/etcdproc"
	"github.com/watchkeeper/watchkeeper/internal/netfault"

	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/v1alpha1"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == serveCommand {
		os.Exit(serve(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == etcdCommand {
		os.Exit(etcdproc.Main(os.Args[2:]))
	}
	os.Exit(run())
}

type config struct {
	duration          time.Duration
	watchers          int
	informers         int
	writers           int
	objects           int
	rate              float64
	restartEvery      time.Duration
	downtime          time.Duration
	longDowntime      time.Duration
	silenceTimeout    time.Duration
	compactEvery      time.Duration
	compactLag        time.Duration
	bookmarkFrequency time.Duration
	finalWait         time.Duration
	heartbeat         time.Duration
	workDir           string
	keep              bool

	decorator       string
	historyWindow   time.Duration
	replicas        int
	etcdMembers     int
	faultEvery      time.Duration
	replicaDowntime time.Duration
	rewind          float64
	linClients      int
	linKeys         int
	linTimeout      time.Duration

	chaos              bool
	chaosFaults        []string
	chaosGap           time.Duration
	cutMin, cutMax     time.Duration
	isolation, slowFor time.Duration
	slowLatency        time.Duration
	slowLoss           float64
	seed               uint64
}

func run() int {
	var c config
	fs := flag.NewFlagSet("soak", flag.ExitOnError)
	fs.DurationVar(&c.duration, "duration", 10*time.Minute, "how long the writers write and etcd is restarted and compacted")
	fs.IntVar(&c.watchers, "watchers", 2000, "plain watchers (list, then watch and resume)")
	fs.IntVar(&c.informers, "informers", 100, "client-go shared informers (WatchList)")
	fs.IntVar(&c.writers, "writers", 8, "writers, each owning its widgets")
	fs.IntVar(&c.objects, "objects", 50, "widgets per writer")
	fs.Float64Var(&c.rate, "rate", 25, "writes per second, all writers together")
	fs.DurationVar(&c.restartEvery, "etcd-restart-every", 2*time.Minute, "how often etcd is restarted")
	fs.DurationVar(&c.downtime, "etcd-downtime", 2*time.Second, "how long etcd stays down at the 1st, 3rd, ... restart: less than the silence timeout, the cache rides it out")
	fs.DurationVar(&c.longDowntime, "etcd-long-downtime", 10*time.Second, "how long etcd stays down at the 2nd, 4th, ... restart (the 4th, 8th, ... then compacted at once): more than the silence timeout, the cache goes not ready and relists")
	fs.DurationVar(&c.silenceTimeout, "silence-timeout", 5*time.Second, "the server's --watch-cache-storage-silence-timeout")
	fs.DurationVar(&c.compactEvery, "compact-every", time.Minute, "how often etcd is compacted")
	fs.DurationVar(&c.compactLag, "compact-lag", 10*time.Second, "how far behind the current revision a compaction cuts")
	fs.DurationVar(&c.bookmarkFrequency, "bookmark-frequency", 5*time.Second, "the server's --watch-cache-bookmark-frequency")
	fs.DurationVar(&c.finalWait, "final-wait", 3*time.Minute, "how long every watcher has to catch up at the end")
	fs.DurationVar(&c.heartbeat, "etcd-heartbeat", time.Second, "how often a key outside the server's prefix is written, as a shared etcd's leases and other resources do; 0 for an etcd only the widgets write to (then, once the writers stop, the cache relists every silence timeout: etcd sends no progress to a watch that starts past its revision)")
	fs.StringVar(&c.workDir, "workdir", "", "where etcd's data and the logs go (default: a new temporary directory)")
	fs.BoolVar(&c.keep, "keep", false, "keep the work directory after a clean run")
	fs.StringVar(&c.decorator, "decorator", "watchkeeper", "the server's --watch-cache-decorator: watchkeeper, or upstream (k8s.io/apiserver's own cache) for the same workload side by side")
	fs.DurationVar(&c.historyWindow, "history-window", 75*time.Second, "watchkeeper's --watch-cache-events-history-window; the default is upstream's fixed window (its 1m bookmark frequency + 15s), so both caches promise the same history")
	fs.IntVar(&c.replicas, "replicas", 1, "sample apiserver replicas over the same etcd; each client talks to one and resumes on the next when its connection breaks")
	fs.IntVar(&c.etcdMembers, "etcd-members", 1, "etcd members; with more than one, the faults are the HA shape's (-fault-every) instead of the single member's restarts")
	fs.DurationVar(&c.faultEvery, "fault-every", 30*time.Second, "HA shape: one fault every so often, in turn: a replica killed (kill -9), a replica stopped (SIGTERM) and started again, etcd's leader killed, a follower stopped")
	fs.DurationVar(&c.replicaDowntime, "replica-downtime", 5*time.Second, "HA shape: how long a killed replica stays down")
	fs.Float64Var(&c.rewind, "rewind", 0.25, "the share of plain watchers' resumes that start from an earlier RV their stream delivered (within 20s) rather than the last: resumption from any RV, checked")
	fs.IntVar(&c.linClients, "lin-clients", 6, "linearizability clients: writes, consistent reads and RV \"0\" reads of their own widgets through every replica, checked with porcupine")
	fs.IntVar(&c.linKeys, "lin-keys", 8, "widgets the linearizability clients share")
	fs.DurationVar(&c.linTimeout, "lin-timeout", time.Minute, "how long porcupine may take for one key's history before the verdict is Unknown; keys are checked one after another, and a search that cannot settle grows by tens of MB a second")
	fs.BoolVar(&c.chaos, "chaos", false, "the chaos schedule (chaos.go): partitions (a replica cut from etcd, etcd's leader or a follower cut from its peers), a slow lossy link and the HA shape's crashes, each held and healed in turn on a clock drawn from -seed; implies -replicas 3 -etcd-members 3 and -compact-lag 5m unless given")
	chaosFaults := fs.String("chaos-faults", strings.Join(allChaosFaults, ","), "the chaos schedule's faults, taken in this order, round and round")
	fs.DurationVar(&c.chaosGap, "chaos-gap", 15*time.Second, "chaos: the pause after each fault healed")
	fs.DurationVar(&c.cutMin, "cut-min", 30*time.Second, "chaos: the shortest cut of a replica from etcd")
	fs.DurationVar(&c.cutMax, "cut-max", 90*time.Second, "chaos: the longest cut of a replica from etcd")
	fs.DurationVar(&c.isolation, "isolation", 30*time.Second, "chaos: how long an etcd member stays cut from its peers")
	fs.DurationVar(&c.slowFor, "slow-for", 2*time.Minute, "chaos: how long a link stays slow")
	fs.DurationVar(&c.slowLatency, "slow-latency", 200*time.Millisecond, "chaos: a slow link's latency, each way")
	fs.Float64Var(&c.slowLoss, "slow-loss", 0.01, "chaos: a slow link's segment loss")
	fs.Uint64Var(&c.seed, "seed", 1, "chaos: the seed of the fault plan (the same for both caches, for the same faults at the same times)")
	plant := fs.String("plant", "", "bugs to put in on purpose, to see the checkers catch them: drop-event, repeat-event, stale-read (comma separated)")
	_ = fs.Parse(os.Args[1:])
	if err := planted.set(*plant); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 2
	}
	if c.chaos {
		given := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
		if !given["replicas"] {
			c.replicas = 3
		}
		if !given["etcd-members"] {
			c.etcdMembers = 3
		}
		if !given["compact-lag"] {
			// kube-apiserver's compactor cuts every 5 minutes at the revision
			// of the previous round: a cut shorter than that heals with the
			// cache's revision still in etcd's history.
			c.compactLag = 5 * time.Minute
		}
		for _, f := range strings.Split(*chaosFaults, ",") {
			if !slices.Contains(allChaosFaults, f) {
				fmt.Fprintf(os.Stderr, "soak: unknown chaos fault %q; known: %s\n", f, strings.Join(allChaosFaults, ","))
				return 2
			}
			c.chaosFaults = append(c.chaosFaults, f)
		}
		if c.cutMax < c.cutMin || c.etcdMembers < 3 {
			fmt.Fprintln(os.Stderr, "soak: -chaos needs -cut-max >= -cut-min and at least 3 etcd members")
			return 2
		}
	}
	if c.replicas < 1 || c.etcdMembers < 1 || (c.etcdMembers > 1 && c.etcdMembers < 3) {
		fmt.Fprintln(os.Stderr, "soak: -replicas must be at least 1, -etcd-members 1 or at least 3 (a cluster that survives a member's loss)")
		return 2
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ok, err := soak(ctx, c)
	if err != nil {
		fmt.Fprintf(os.Stderr, "soak: %v\n", err)
		return 2
	}
	if !ok {
		return 1
	}
	return 0
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s soak: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func soak(ctx context.Context, c config) (ok bool, err error) {
	dir := c.workDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "watchkeeper-soak-"); err != nil {
			return false, err
		}
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, err
	}
	defer func() {
		if ok && err == nil && !c.keep {
			_ = os.RemoveAll(dir)
		} else {
			logf("work directory kept: %s (server*.log, etcd-*/etcd.log, clients.log, lin-*.html)", dir)
		}
	}()
	// client-go's own logs (reflectors retrying while etcd is down, ...).
	clientLog, err := os.Create(filepath.Join(dir, "clients.log"))
	if err != nil {
		return false, err
	}
	defer clientLog.Close()
	klog.LogToStderr(false)
	klog.SetOutput(clientLog)

	// etcd, and the checker's record of it, from before the first write.
	env, err := startEtcdEnv(dir, c.etcdMembers)
	if err != nil {
		return false, err
	}
	defer env.stop()
	client, err := clientv3.New(clientv3.Config{Endpoints: env.endpoints(), DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return false, err
	}
	defer client.Close()
	head, err := client.Get(ctx, widgetsPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return false, err
	}
	keys := newKeyTable()
	tr := newTruth(keys)
	truthCtx, stopTruth := context.WithCancel(ctx)
	defer stopTruth()
	var truthDone sync.WaitGroup
	// From the current revision, not the next: etcd sends no progress to a
	// watch whose start is ahead of its revision (watchable_store.go
	// progressIfSync), and a fresh etcd holds no widget to replay.
	truthDone.Go(func() { tr.run(truthCtx, client, head.Header.Revision) })
	if c.heartbeat > 0 {
		truthDone.Go(func() { heartbeat(truthCtx, client, c.heartbeat) })
	}

	// The servers: the same flags whichever the cache (upstream's ignores
	// the watchkeeper ones).
	extra := []string{
		"--watch-cache-decorator=" + c.decorator,
		"--watch-cache-bookmark-frequency=" + c.bookmarkFrequency.String(),
		"--watch-cache-bookmark-pre-deadline-offset=1s",
		"--watch-cache-storage-silence-timeout=" + c.silenceTimeout.String(),
		"--watch-cache-events-history-window=" + c.historyWindow.String(),
	}
	set := &replicaSet{}
	defer set.stop()
	for i := range c.replicas {
		links, err := newEtcdLinks(env, i)
		if err != nil {
			return false, err
		}
		front, err := netfault.New(netfault.Config{Seed: uint64(10000 + i)})
		if err != nil {
			links.close()
			return false, err
		}
		r := &replica{index: i, name: "server", dir: dir, links: links, front: front, extra: extra}
		if c.replicas > 1 {
			r.name = fmt.Sprintf("server-%d", i)
		}
		set.rs = append(set.rs, r)
	}
	{
		errs := make([]error, len(set.rs))
		var wg sync.WaitGroup
		for i, r := range set.rs {
			wg.Go(func() { errs[i] = r.start(ctx) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return false, err
		}
	}
	srv := set.rs[0].process()
	goroutinesBefore, err := allGoroutines(ctx, set)
	if err != nil {
		return false, err
	}
	dumpGoroutines(ctx, srv, filepath.Join(dir, "goroutines-before.txt"))
	for _, r := range set.rs {
		p := r.process()
		logf("%s: %s --watch-cache-decorator=%s (pid %d)", r.name, p.URL, c.decorator, p.PID)
	}
	logf("etcd %s, %d sample apiserver(s) (%v goroutines), work directory %s", strings.Join(env.endpoints(), ","), c.replicas, goroutinesBefore, dir)
	st := newStats()

	// The watchers.
	specs, err := catalog()
	if err != nil {
		return false, err
	}
	var stopping atomic.Bool
	isStopping := stopping.Load
	watchCtx, stopWatchers := context.WithCancel(ctx)
	defer stopWatchers()
	var watchersWG sync.WaitGroup
	recs := make([]*watcherRec, 0, c.watchers+c.informers)
	var informers []*informerHandle
	for i := range c.watchers + c.informers {
		r := &watcherRec{kind: "watch", spec: specs[i%len(specs)]}
		if i >= c.watchers {
			r.kind = "informer"
			informers = append(informers, &informerHandle{rec: r, informer: informer(watchCtx, set, i%c.replicas, keys, r, st, isStopping, &watchersWG)})
		} else {
			watchersWG.Go(func() { plainWatcher(watchCtx, set, i%c.replicas, keys, r, st, isStopping, c.rewind) })
		}
		recs = append(recs, r)
		time.Sleep(5 * time.Millisecond) // a ramp, not a stampede
	}
	logf("%d watchers and %d informers over %d specs started", c.watchers, c.informers, len(specs))

	// The writers, paced by one token source.
	writeCtx, stopWriters := context.WithCancel(ctx)
	defer stopWriters()
	var writersWG sync.WaitGroup
	tokens := make(chan struct{})
	writersWG.Go(func() {
		t := time.NewTicker(time.Duration(float64(time.Second) / c.rate))
		defer t.Stop()
		for {
			select {
			case <-writeCtx.Done():
				return
			case <-t.C:
				select {
				case tokens <- struct{}{}:
				default: // every writer busy: the write is skipped, not queued
				}
			}
		}
	})
	for id := range c.writers {
		writersWG.Go(func() { writer(writeCtx, set, id%c.replicas, id, c.objects, tokens, st) })
	}
	// The linearizability clients, through every replica in turn.
	linRec := newLinRecorder()
	linStart := time.Now()
	for id := range c.linClients {
		writersWG.Go(func() { linClient(writeCtx, set, id%c.replicas, id, c.linKeys, linRec, tr.seen.Load) })
	}

	// The faults: etcd restarts and compactions.
	chaosCtx, stopChaos := context.WithCancel(ctx)
	defer stopChaos()
	var chaosWG sync.WaitGroup
	var restarts, compactions atomic.Int64
	comp := &compaction{}
	var chaosErr atomic.Value
	faults := &haFaults{}
	chaosStats := newChaosStats()
	switch {
	case c.chaos:
		h := &faultRunner{c: c, set: set, env: env, f: faults, chaosCtx: chaosCtx, runCtx: ctx}
		chaosWG.Go(func() {
			if err := chaosSchedule(h, chaosStats, linRec, c.linKeys, tr.seen.Load); err != nil {
				chaosErr.Store(err)
			}
		})
	case c.etcdMembers > 1:
		chaosWG.Go(func() {
			if err := haChaos(chaosCtx, ctx, c, set, env, faults); err != nil {
				chaosErr.Store(err)
			}
		})
	default:
		chaosWG.Go(func() {
			singleChaos(chaosCtx, c, env.members()[0], client, tr, comp, &restarts, &compactions, &chaosErr)
		})
	}
	// The servers' counters, read now and then (and before each fault).
	chaosWG.Go(func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-chaosCtx.Done():
				return
			case <-t.C:
				set.scrape(chaosCtx)
			}
		}
	})
	chaosWG.Go(func() { compactor(chaosCtx, client, tr, comp, c.compactEvery, c.compactLag, &compactions) })

	start := time.Now()
	progress := time.NewTicker(30 * time.Second)
	deadline := time.After(c.duration)
	for running := true; running; {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-deadline:
			running = false
		case <-progress.C:
			logf("%v: writes %d (errors %d), delivered %d, bookmarks %d, 410s %d (on resume %d), relists %d, streams %d (ended early %d, resumed elsewhere %d), etcd restarts %d, compactions %d, errors %s",
				time.Since(start).Round(time.Second), st.writes.Load(), st.writeErrs.Load(), st.delivered.Load(), st.bookmarks.Load(),
				st.gone.Load(), st.resumeGone.Load(), st.relists.Load(), st.streams.Load(), st.endedEarly.Load(), st.resumedElsewhere.Load(),
				restarts.Load(), compactions.Load(), st.errorSummary())
		}
	}
	progress.Stop()
	// The writers stop with the faults, so a fault's last steps (a
	// replica that takes a minute to stop) write nothing more.
	stopWriters()
	writersWG.Wait()
	writesStopped := time.Since(start)
	stopChaos()
	chaosWG.Wait()
	if err, _ := chaosErr.Load().(error); err != nil {
		return false, err
	}
	if err := env.startAll(); err != nil { // up for the end, whatever the schedule
		return false, err
	}
	for _, r := range set.rs {
		if _, up := r.client(); !up {
			if err := r.start(ctx); err != nil {
				return false, err
			}
		}
	}

	// The end: the checker catches up with etcd, then every watcher with
	// the checker.
	final, err := tr.waitCaughtUp(ctx, client, 2*time.Minute)
	if err != nil {
		return false, err
	}
	logf("writes stopped after %v, faults after %v; etcd at revision %d; waiting for every watcher to reach it",
		writesStopped.Round(time.Second), time.Since(start).Round(time.Second), final)
	waitStart := time.Now()
	behind := 0
	for {
		behind = 0
		for _, r := range recs {
			if !r.caughtUp(final) {
				behind++
			}
		}
		if behind == 0 || time.Since(waitStart) > c.finalWait {
			break
		}
		time.Sleep(time.Second)
	}
	logf("%d watchers caught up in %v, %d behind", len(recs)-behind, time.Since(waitStart).Round(time.Second), behind)
	storeMismatch := 0
	finalTruth := finalState(tr.snapshot())
	for _, h := range informers {
		store := map[int32]uint64{}
		for _, obj := range h.informer.GetStore().List() {
			if w, ok := obj.(*v1alpha1.Widget); ok {
				store[keys.id(w.Namespace+"/"+w.Name)] = parseRV(w.ResourceVersion)
			}
		}
		storeMismatch += storeMismatches(store, finalTruth, h.rec.spec)
	}
	stopping.Store(true)
	stopWatchers()
	watchersWG.Wait()
	stopTruth()
	truthDone.Wait()

	// The servers once their clients are gone: their connections too.
	for _, r := range set.rs {
		r.mu.Lock()
		cfg := r.cfg
		r.mu.Unlock()
		if t, err := rest.TransportFor(cfg); err == nil {
			utilnet.CloseIdleConnectionsFor(t)
		}
	}
	goroutinesAfter := goroutinesBefore
	for settle := time.Now(); time.Since(settle) < 20*time.Second; time.Sleep(2 * time.Second) {
		if goroutinesAfter, err = allGoroutines(ctx, set); err != nil {
			return false, err
		}
		if goroutinesAfter <= goroutinesBefore {
			break
		}
	}
	srv = set.rs[0].process()
	dumpGoroutines(ctx, srv, filepath.Join(dir, "goroutines-after.txt"))
	var maxRSS uint64
	for _, r := range set.rs {
		rss, err := r.process().PeakRSSBytes()
		if err != nil {
			return false, err
		}
		maxRSS = max(maxRSS, rss)
	}
	set.scrape(ctx)
	terminated, cacheRelists := set.counters()
	var self syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)

	checkStart := time.Now()
	events := tr.snapshot()
	linOps := linRec.snapshot()
	res := check(events, append(slices.Clone(recs), linStates(linOps, keys)...), final, keys)
	logf("checked %d watchers' %d states and %d streams against %d etcd events in %v", len(recs), res.states, res.streams, len(events), time.Since(checkStart).Round(time.Millisecond))
	for _, ex := range res.examples {
		logf("  %s", ex)
	}
	for code, msg := range chaosStats.messages {
		logf("a cut replica's answer %s, e.g.: %.300s", code, msg)
	}
	linStartCheck := time.Now()
	lin := checkLinearizability(linOps, events, keys, c.linKeys, linStart, dir, c.linTimeout)
	logf("checked %d operations of %d linearizability clients for linearizability in %v: %s (read errors by code: %v; per key, verdict:operations:search time: %s)",
		lin.ops, c.linClients, time.Since(linStartCheck).Round(time.Millisecond), lin.verdict, linRec.errors, strings.Join(lin.perKey, " "))
	if len(lin.failing) > 0 {
		logf("not linearizable:\n%s", lin.failure())
	}
	if len(lin.unsettled) > 0 {
		logf("histories whose search timed out (-lin-timeout %v): %s", c.linTimeout, strings.Join(lin.unsettled, " "))
	}
	if lin.visualization != "" {
		logf("porcupine's visualization of it: %s", lin.visualization)
	}
	if errs := st.errorSummary(); errs != "{}" {
		logf("errors clients saw (by where:code): %s", errs)
		st.mu.Lock()
		for k, m := range st.messages {
			logf("  %s, e.g.: %.300s", k, m)
		}
		st.mu.Unlock()
	}

	faultFigures := fmt.Sprintf("etcd_restarts=%d", restarts.Load())
	if c.chaos {
		faultFigures = fmt.Sprintf("chaos_seed=%d %s replica_stop_times=%s etcd_crashes=%d", c.seed, chaosStats, faults.stopTimesString(), env.crashes.Load())
	} else if c.etcdMembers > 1 {
		faultFigures = fmt.Sprintf("replica_kills=%d replica_sigterms=%d replica_stop_times=%s etcd_leader_kills=%d etcd_follower_stops=%d",
			faults.kills.Load(), faults.sigterms.Load(), faults.stopTimesString(), faults.leaderStops.Load(), faults.followerStops.Load())
	}
	mode := ""
	if c.chaos {
		mode = "chaos "
	}
	fmt.Printf("soak: %sdecorator=%s replicas=%d etcd_members=%d duration=%v written=%d delivered=%d lost=%d duplicated=%d unexpected=%d "+
		"violations=%d (%s) rewinds=%d "+
		"410s=%d resume_410s=%d relists=%d cache_relists=%.0f terminated_watchers=%.0f streams_ended_early=%d resumed_elsewhere=%d "+
		"watchers=%d informers=%d behind=%d store_mismatches=%d streams=%d %s compactions=%d "+
		"max_rss=%.0fMiB goroutines_before=%.0f goroutines_after=%.0f soak_max_rss=%.0fMiB %s\n",
		mode, c.decorator, c.replicas, c.etcdMembers, c.duration, res.written, res.delivered, res.lost, res.duplicated, res.unexpected,
		res.totalViolations(), res.violationsString(), res.rewinds,
		st.gone.Load(), st.resumeGone.Load(), st.relists.Load(), cacheRelists, terminated, st.endedEarly.Load(), st.resumedElsewhere.Load(),
		c.watchers, c.informers, behind, storeMismatch, res.streams, faultFigures, compactions.Load(),
		float64(maxRSS)/(1<<20), goroutinesBefore, goroutinesAfter, float64(self.Maxrss)/1024, lin)
	ok = lin.verdict != porcupine.Illegal && lin.staleConsistent == 0 && chaosStats.cutStale == 0 && res.lost == 0 && res.duplicated == 0 && res.unexpected == 0 && res.totalViolations() == 0 && behind == 0 && storeMismatch == 0 && res.written > 0
	return ok, nil
}

// singleChaos is the single member's fault schedule: etcd restarted every
// c.restartEvery, alternately c.downtime and c.longDowntime down, and after
// every other long outage compacted at once.
func singleChaos(chaosCtx context.Context, c config, etcd *etcdproc.Member, client *clientv3.Client, tr *truth, comp *compaction,
	restarts, compactions *atomic.Int64, chaosErr *atomic.Value) {
	t := time.NewTicker(c.restartEvery)
	defer t.Stop()
	for {
		select {
		case <-chaosCtx.Done():
			return
		case <-t.C:
		}
		// Restarts go short, long, short, long with a compaction, and
		// round again. A short outage is shorter than the server's
		// silence timeout, a long one longer; after every other long one
		// etcd is compacted at once, so whatever must go back to etcd
		// from before the outage (a cache, a watcher resuming where a
		// cache cannot serve it) finds that history gone: 410.
		n := restarts.Load()
		down := c.downtime
		if n%2 == 1 {
			down = c.longDowntime
		}
		etcd.Stop()
		select {
		case <-chaosCtx.Done():
		case <-time.After(down):
		}
		if err := etcd.Start(); err != nil {
			chaosErr.Store(err)
			return
		}
		restarts.Add(1)
		if n%4 != 3 {
			logf("etcd restarted after %v down", down)
			continue
		}
		// Move the revision past anything a watcher can resume from
		// (keys no resource watches), then compact up to it, before
		// the cache is ready again.
		for try := time.Now(); time.Since(try) < 20*time.Second && chaosCtx.Err() == nil; time.Sleep(time.Second) {
			if err := bumpRevision(chaosCtx, client, 50); err != nil {
				continue
			}
			if _, err := tr.waitCaughtUp(chaosCtx, client, 5*time.Second); err != nil {
				continue
			}
			if target := int64(tr.seen.Load()); comp.compact(chaosCtx, client, target) {
				compactions.Add(1)
				logf("etcd restarted after %v down, and compacted at once at %d", down, target)
				break
			}
		}
	}
}

// informerHandle keeps an informer with its record, for the store check.
type informerHandle struct {
	rec      *watcherRec
	informer cache.SharedIndexInformer
}

// heartbeat writes a key no resource of the server watches, so etcd's
// revision moves even when the writers are quiet.
func heartbeat(ctx context.Context, client *clientv3.Client, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		_, _ = client.Put(wctx, "/soak/heartbeat", time.Now().Format(time.RFC3339Nano))
		cancel()
	}
}

// bumpRevision writes n times a key no resource watches.
func bumpRevision(ctx context.Context, client *clientv3.Client, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for i := range n {
		if _, err := client.Put(ctx, "/soak/bump", strconv.Itoa(i)); err != nil {
			return err
		}
	}
	return nil
}

// compaction compacts etcd the way an apiserver does (etcd3.Compact,
// through compact_rev_key, so the server's store learns of it).
type compaction struct {
	mu      sync.Mutex
	version int64 // compact_rev_key's, as last seen
}

func (c *compaction) compact(ctx context.Context, client *clientv3.Client, target int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for range 2 { // a second try when the key moved under us
		var compacted int64
		var err error
		c.version, _, compacted, err = etcd3.Compact(ctx, client, c.version, target)
		if err != nil {
			return false
		}
		if compacted == target {
			return true
		}
	}
	return false
}

// compactor compacts etcd every interval, at the revision it had lag ago,
// never past what the checker has recorded.
func compactor(ctx context.Context, client *clientv3.Client, tr *truth, comp *compaction, every, lag time.Duration, count *atomic.Int64) {
	type sample struct {
		at  time.Time
		rev int64
	}
	var samples []sample
	lastCompaction := time.Now()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := client.Get(rctx, widgetsPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		cancel()
		if err != nil {
			continue // etcd down
		}
		now := time.Now()
		samples = append(samples, sample{at: now, rev: resp.Header.Revision})
		for len(samples) > 1 && now.Sub(samples[1].at) >= lag {
			samples = samples[1:]
		}
		if now.Sub(lastCompaction) < every || now.Sub(samples[0].at) < lag {
			continue
		}
		if target := min(samples[0].rev, int64(tr.seen.Load())); comp.compact(ctx, client, target) {
			count.Add(1)
			lastCompaction = now
			logf("etcd compacted at %d (the revision %v ago)", target, now.Sub(samples[0].at).Round(time.Second))
		}
	}
}

// catalog is the specs watchers cycle through: every namespace and all of
// them, times selectors on labels (equality, sets), on the trigger field
// spec.nodeName (the cache's index), on spec.color, and both.
func catalog() ([]*spec, error) {
	selectors := [][2]string{
		{"", ""},
		{"app=soak", ""},
		{"tier in (a,b)", ""},
		{"tier notin (c),shard!=s0", ""},
		{"", "spec.color!=red"},
		{"shard in (s1,s2),tier=c", "spec.color=blue"},
	}
	for i := range soakShards {
		selectors = append(selectors, [2]string{fmt.Sprintf("shard=s%d", i), ""})
	}
	for i := range soakNodes {
		selectors = append(selectors, [2]string{"", fmt.Sprintf("spec.nodeName=node-%d", i)})
		selectors = append(selectors, [2]string{"app=soak", fmt.Sprintf("spec.nodeName=node-%d,spec.color=green", i)})
	}
	namespaces := []string{""}
	for i := range soakNamespaces {
		namespaces = append(namespaces, soakNamespace(i))
	}
	var out []*spec
	for _, sel := range selectors {
		for _, ns := range namespaces {
			s, err := newSpec(ns, sel[0], sel[1])
			if err != nil {
				return nil, fmt.Errorf("spec %q %q: %w", sel[0], sel[1], err)
			}
			out = append(out, s)
		}
	}
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out, nil
}

func (s *stats) errorSummary() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.errors))
	for k := range s.errors {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("{")
	for i, k := range keys {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s=%d", k, s.errors[k])
	}
	b.WriteString("}")
	return b.String()
}
