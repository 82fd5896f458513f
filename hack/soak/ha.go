package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// haFaults counts the HA shape's faults and keeps the replicas' stop times.
type haFaults struct {
	kills, sigterms, leaderStops, followerStops atomic.Int64

	mu        sync.Mutex
	stopTimes []time.Duration // SIGTERM to exit, one per rolling restart
}

func (f *haFaults) stopTimesString() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.stopTimes) == 0 {
		return "-"
	}
	ts := append([]time.Duration(nil), f.stopTimes...)
	sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = t.Round(100 * time.Millisecond).String()
	}
	return strings.Join(parts, ",")
}

// faultRunner does the HA shape's crash faults, for the fixed schedule
// below and for the chaos schedule (chaos.go). Waits end with chaosCtx;
// restarts use runCtx, so a fault under way when the duration ends still
// puts back what it took away.
type faultRunner struct {
	c                 config
	set               *replicaSet
	env               *etcdEnv
	f                 *haFaults
	chaosCtx, runCtx  context.Context
	stopping          sync.WaitGroup // replicas told to stop, until they run again
	probing           sync.WaitGroup // requests to a cut replica, until answered
	cutMu             sync.Mutex
	healed            int // cuts healed so far
	stopErr           atomic.Value
	nextReplicaVictim int
}

func (h *faultRunner) pause(d time.Duration) {
	select {
	case <-h.chaosCtx.Done():
	case <-time.After(d):
	}
}

// victim is the next replica to take down: replicas in turn.
func (h *faultRunner) victim() *replica {
	r := h.set.rs[h.nextReplicaVictim%len(h.set.rs)]
	h.nextReplicaVictim++
	return r
}

// wait waits for the replicas told to stop to run again, and returns the
// first error starting one.
func (h *faultRunner) wait() error {
	h.stopping.Wait()
	h.probing.Wait()
	err, _ := h.stopErr.Load().(error)
	return err
}

// killReplica kills r (kill -9) and starts it again after
// c.replicaDowntime.
func (h *faultRunner) killReplica(r *replica) error {
	proc := r.down(h.runCtx)
	if proc == nil {
		return nil
	}
	proc.Kill()
	h.f.kills.Add(1)
	logf("%s killed (kill -9); back in %v", r.name, h.c.replicaDowntime)
	h.pause(h.c.replicaDowntime)
	return r.start(h.runCtx)
}

// sigtermReplica tells r to stop (SIGTERM) and, once it exited, starts it
// again, as a rolling restart does; the schedule goes on while it stops
// (how long it takes is a figure of the soak).
func (h *faultRunner) sigtermReplica(r *replica) {
	proc := r.down(h.runCtx)
	if proc == nil {
		return
	}
	h.f.sigterms.Add(1)
	logf("%s told to stop (SIGTERM)", r.name)
	h.stopping.Go(func() {
		t0 := time.Now()
		proc.Stop()
		took := time.Since(t0)
		h.f.mu.Lock()
		h.f.stopTimes = append(h.f.stopTimes, took)
		h.f.mu.Unlock()
		logf("%s stopped in %v after SIGTERM; starting it again", r.name, took.Round(100*time.Millisecond))
		if err := r.start(h.runCtx); err != nil {
			h.stopErr.Store(err)
		}
	})
}

// etcdCrash kills etcd's leader (SIGKILL: raft stops without handing
// over) or stops a follower (SIGTERM), and starts it again after
// c.downtime.
func (h *faultRunner) etcdCrash(leader bool) error {
	cluster := h.env.cluster
	i, what, err := h.etcdTarget(leader)
	if err != nil {
		return err
	}
	m := cluster.Members[i]
	t0 := time.Now()
	if leader {
		m.Kill()
		h.f.leaderStops.Add(1)
	} else {
		m.Stop()
		h.f.followerStops.Add(1)
	}
	logf("etcd %s (member %d) %s in %v; back in %v", what, i, map[bool]string{true: "killed", false: "stopped"}[leader],
		time.Since(t0).Round(100*time.Millisecond), h.c.downtime)
	h.pause(h.c.downtime)
	if err := m.Start(); err != nil {
		return fmt.Errorf("etcd member %d: %w", i, err)
	}
	if l, err := cluster.WaitLeader(h.runCtx, 30*time.Second); err == nil {
		logf("etcd member %d back; leader member %d", i, l)
	}
	return nil
}

// etcdTarget is the member a fault of etcd's takes: the leader, or the
// member after it (a follower), once every running member agrees on one.
func (h *faultRunner) etcdTarget(leader bool) (int, string, error) {
	cluster := h.env.cluster
	lead, err := cluster.WaitLeader(h.runCtx, 30*time.Second)
	if err != nil {
		return 0, "", err
	}
	if !leader {
		return (lead + 1) % len(cluster.Members), "follower", nil
	}
	return lead, "leader", nil
}

// haChaos is the HA shape's fault schedule, one fault every c.faultEvery
// (on a fixed clock, so both caches get their faults at the same times),
// in turn: a replica killed (kill -9), a replica stopped (SIGTERM) and
// started again, etcd's leader killed, a follower stopped. Replicas are
// taken in turn too. Compactions run on their own schedule (compactor).
func haChaos(chaosCtx, runCtx context.Context, c config, set *replicaSet, env *etcdEnv, f *haFaults) (err error) {
	h := &faultRunner{c: c, set: set, env: env, f: f, chaosCtx: chaosCtx, runCtx: runCtx}
	defer func() {
		if e := h.wait(); e != nil && err == nil {
			err = e
		}
	}()
	next := time.Now()
	// No fault starts in the last half interval: a stop under way when the
	// writers stop would outlast the run by as long as it takes.
	last := next.Add(c.duration - c.faultEvery/2)
	for n := 0; ; n++ {
		next = next.Add(c.faultEvery)
		if next.After(last) {
			<-chaosCtx.Done()
			return nil
		}
		h.pause(time.Until(next))
		if chaosCtx.Err() != nil {
			return nil
		}
		switch n % 4 {
		case 0:
			if err := h.killReplica(h.victim()); err != nil {
				return err
			}
		case 1:
			h.sigtermReplica(h.victim())
		case 2, 3:
			if err := h.etcdCrash(n%4 == 2); err != nil {
				return err
			}
		}
	}
}
