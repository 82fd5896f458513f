package main

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	"github.com/watchkeeper/watchkeeper/internal/childserver"
	"github.com/watchkeeper/watchkeeper/internal/netfault"
	clientset "github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/generated/clientset/versioned"
)

// Server metrics the soak reads off every replica: watches a cache ended
// (upstream's counter, which both caches feed, for a watcher that could
// not keep up) and a cache's (re)initializations, each a list of etcd.
const (
	metricTerminated = "apiserver_terminated_watchers_total"
	metricInits      = "apiserver_watch_cache_initializations_total"
)

// replica is one sample apiserver child of the soak. A restart is a new
// process on the same data directory (same admin token and certificate) on
// a new port; clients take the replica's current client each time they
// connect, so they follow it.
type replica struct {
	index int
	name  string // "server" for the single server, "server-<i>" in the HA shape
	dir   string // the soak's work directory
	extra []string
	// links are its ways to etcd, front the way its clients reach it: proxies
	// the faults cut or slow.
	links etcdLinks
	front *netfault.Proxy

	mu   sync.Mutex
	proc *childserver.Process
	cs   clientset.Interface
	cfg  *rest.Config
	up   bool
	gen  int
	// Counters over the replica's processes: done holds what processes
	// gone had counted at their last scrape, cur the running one's.
	doneTerminated, curTerminated float64
	doneRelists, curRelists       float64 // initializations after each process's first
	baseInits                     float64 // the running process's initializations once ready
}

// start runs a new process of the replica and waits until it is ready.
func (r *replica) start(ctx context.Context) error {
	r.mu.Lock()
	gen := r.gen
	r.mu.Unlock()
	logName := r.name + ".log"
	if gen > 0 {
		logName = fmt.Sprintf("%s.%d.log", r.name, gen)
	}
	var proc *childserver.Process
	var err error
	for range 3 { // a free port taken in the meantime: another try gets another
		proc, err = startServer(ctx, filepath.Join(r.dir, r.name), filepath.Join(r.dir, logName), r.links.endpoints(), r.extra)
		if err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("%s: %w", r.name, err)
	}
	u, err := url.Parse(proc.URL)
	if err != nil {
		proc.Kill()
		return err
	}
	r.front.SetTarget(u.Host)
	cfg := rest.CopyConfig(proc.Admin)
	cfg.Host = "https://" + r.front.Addr() // through the front proxy, to this process
	cfg.QPS, cfg.Burst = -1, 0
	cs, err := clientset.NewForConfig(cfg)
	if err != nil {
		proc.Kill()
		return err
	}
	base := 0.0
	if m, err := proc.MetricSums(ctx, metricInits); err == nil {
		base = m[0]
	}
	r.mu.Lock()
	r.proc, r.cs, r.cfg, r.up, r.baseInits = proc, cs, cfg, true, base
	r.gen++
	r.mu.Unlock()
	return nil
}

// scrape reads the running process's counters.
func (r *replica) scrape(ctx context.Context) {
	r.mu.Lock()
	proc := r.proc
	r.mu.Unlock()
	if proc == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := proc.MetricSums(ctx, metricTerminated, metricInits)
	if err != nil {
		return
	}
	r.mu.Lock()
	if r.proc == proc {
		r.curTerminated, r.curRelists = m[0], max(0, m[1]-r.baseInits)
	}
	r.mu.Unlock()
}

// down takes the replica out of the clients' rotation (as a load balancer
// does once a replica fails its health check) and returns its process, its
// counters read a last time.
func (r *replica) down(ctx context.Context) *childserver.Process {
	r.mu.Lock()
	r.up = false
	r.mu.Unlock()
	r.scrape(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	proc := r.proc
	r.proc = nil
	r.doneTerminated += r.curTerminated
	r.doneRelists += r.curRelists
	r.curTerminated, r.curRelists = 0, 0
	return proc
}

// client is the replica's current client, and whether it is up.
func (r *replica) client() (clientset.Interface, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cs, r.up && r.cs != nil
}

func (r *replica) process() *childserver.Process {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.proc
}

func (r *replica) counters() (terminated, relists float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.doneTerminated + r.curTerminated, r.doneRelists + r.curRelists
}

// replicaSet is the soak's servers; clients address them by index.
type replicaSet struct {
	rs []*replica
}

// client is replica i's client when it is up; otherwise the next replica
// that is up, and its index. ok is false when none is.
func (s *replicaSet) client(i int) (int, clientset.Interface, bool) {
	for k := range len(s.rs) {
		j := (i + k) % len(s.rs)
		if cs, up := s.rs[j].client(); up {
			return j, cs, true
		}
	}
	return i, nil, false
}

// next is the replica after i, where a client goes when its connection to
// i broke.
func (s *replicaSet) next(i int) int { return (i + 1) % len(s.rs) }

func (s *replicaSet) scrape(ctx context.Context) {
	for _, r := range s.rs {
		r.scrape(ctx)
	}
}

func (s *replicaSet) counters() (terminated, relists float64) {
	for _, r := range s.rs {
		t, l := r.counters()
		terminated += t
		relists += l
	}
	return terminated, relists
}

func (s *replicaSet) stop() {
	var wg sync.WaitGroup
	for _, r := range s.rs {
		if p := r.process(); p != nil {
			wg.Go(p.Stop)
		}
	}
	wg.Wait()
	for _, r := range s.rs {
		r.front.Close()
		r.links.close()
	}
}
