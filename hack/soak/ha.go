package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watchkeeper/watchkeeper/internal/etcdproc"
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

// haChaos is the HA shape's fault schedule, one fault every c.faultEvery
// (on a fixed clock, so both caches get their faults at the same times),
// in turn: a replica killed (kill -9) and restarted after
// c.replicaDowntime; a replica told to stop (SIGTERM) and, once it exited,
// started again, as a rolling restart does (the schedule goes on while it
// stops; how long it takes is a figure of the soak); etcd's leader killed (raft
// stops without handing leadership over) and started again after
// c.downtime; a follower stopped and started again after c.downtime.
// Replicas are taken in turn too. Compactions run on their own schedule
// (compactor). Waits end with chaosCtx; restarts use runCtx, so a fault
// under way when the duration ends still puts back what it took away.
func haChaos(chaosCtx, runCtx context.Context, c config, set *replicaSet, cluster *etcdproc.Cluster, f *haFaults) (err error) {
	pause := func(d time.Duration) {
		select {
		case <-chaosCtx.Done():
		case <-time.After(d):
		}
	}
	var stopping sync.WaitGroup // replicas told to stop, until they run again
	var stopErr atomic.Value
	defer func() {
		stopping.Wait()
		if e, _ := stopErr.Load().(error); e != nil && err == nil {
			err = e
		}
	}()
	victim := 0
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
		pause(time.Until(next))
		if chaosCtx.Err() != nil {
			return nil
		}
		switch n % 4 {
		case 0, 1:
			r := set.rs[victim%len(set.rs)]
			victim++
			proc := r.down(runCtx)
			if proc == nil {
				continue
			}
			if n%4 == 0 {
				proc.Kill()
				f.kills.Add(1)
				logf("%s killed (kill -9); back in %v", r.name, c.replicaDowntime)
				pause(c.replicaDowntime)
				if err := r.start(runCtx); err != nil {
					return err
				}
				continue
			}
			f.sigterms.Add(1)
			logf("%s told to stop (SIGTERM)", r.name)
			stopping.Go(func() {
				t0 := time.Now()
				proc.Stop()
				took := time.Since(t0)
				f.mu.Lock()
				f.stopTimes = append(f.stopTimes, took)
				f.mu.Unlock()
				logf("%s stopped in %v after SIGTERM; starting it again", r.name, took.Round(100*time.Millisecond))
				if err := r.start(runCtx); err != nil {
					stopErr.Store(err)
				}
			})
		case 2, 3:
			lead, err := cluster.WaitLeader(runCtx, 30*time.Second)
			if err != nil {
				return err
			}
			i, what := lead, "leader"
			if n%4 == 3 {
				i, what = (lead+1)%len(cluster.Members), "follower"
			}
			m := cluster.Members[i]
			t0 := time.Now()
			if what == "leader" {
				m.Kill()
				f.leaderStops.Add(1)
			} else {
				m.Stop()
				f.followerStops.Add(1)
			}
			logf("etcd %s (member %d) %s in %v; back in %v", what, i, map[string]string{"leader": "killed", "follower": "stopped"}[what],
				time.Since(t0).Round(100*time.Millisecond), c.downtime)
			pause(c.downtime)
			if err := m.Start(); err != nil {
				return fmt.Errorf("etcd member %d: %w", i, err)
			}
			if l, err := cluster.WaitLeader(runCtx, 30*time.Second); err == nil {
				logf("etcd member %d back; leader member %d", i, l)
			}
		}
	}
}
