package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/watchkeeper/watchkeeper/internal/netfault"
)

// The chaos schedule (-chaos): the network's faults as well as crashes, as
// etcd's robustness suite injects them, each held for a while and healed,
// one after another on a fixed clock drawn from -seed, so both caches get
// the same faults at the same times:
//
//   - replica-etcd-cut: one replica cut from every etcd member (blackhole:
//     its connections stay open and go silent) for -cut-min to -cut-max.
//     Meanwhile a prober asks it, every second, for a consistent LIST and
//     GET and an RV "0" LIST of the linearizability widgets, and its
//     /readyz: it must go not ready and answer 429 or 504 rather than
//     serve a stale state as fresh (the consistent answers join the
//     porcupine history; a consistent LIST below what etcd had at the call
//     is counted stale). After the heal: how long until it is ready again,
//     and how many times its caches relisted (none is the goal: its watch
//     resumes from where it was).
//   - leader-isolated: etcd's leader cut from its peers (a minority leader
//     until it steps down), for -isolation; how long until the majority
//     agrees on a new leader.
//   - follower-isolated: a follower cut from its peers, for -isolation.
//   - slow-link: one replica's links to etcd and its clients' link to it
//     made slow (-slow-latency each way) and lossy (-slow-loss; netfault
//     says what a lost segment costs), for -slow-for.
//   - replica-kill, replica-sigterm, etcd-leader-kill, etcd-follower-stop:
//     the HA shape's crashes (ha.go), etcd's a SIGKILL or SIGTERM of a
//     member's process.
const (
	faultCut      = "replica-etcd-cut"
	faultLeader   = "leader-isolated"
	faultFollower = "follower-isolated"
	faultSlow     = "slow-link"
	faultKill     = "replica-kill"
	faultSigterm  = "replica-sigterm"
	faultEtcdKill = "etcd-leader-kill"
	faultEtcdStop = "etcd-follower-stop"
)

var allChaosFaults = []string{faultCut, faultLeader, faultSlow, faultFollower, faultKill, faultEtcdKill, faultSigterm, faultEtcdStop}

// chaosEpisode is one fault of the plan: when it starts (after the run's
// start), what, for how long, and which replica where it takes one.
type chaosEpisode struct {
	at, hold time.Duration
	kind     string
	replica  int
}

// planChaos lays the faults out on the run's clock: each kind of
// c.chaosFaults in turn, c.chaosGap after the previous one healed; a fault
// that would not heal before the run ends is left out (the next kind that
// fits goes instead).
func planChaos(c config) []chaosEpisode {
	r := rand.New(rand.NewPCG(c.seed, 0x50a4))
	var out []chaosEpisode
	t := c.chaosGap
	victim := 0
	for i, misses := 0, 0; misses < len(c.chaosFaults); i++ {
		kind := c.chaosFaults[i%len(c.chaosFaults)]
		var hold time.Duration
		switch kind {
		case faultCut:
			hold = c.cutMin + time.Duration(r.Int64N(int64(c.cutMax-c.cutMin)+1))
		case faultLeader, faultFollower:
			hold = c.isolation
		case faultSlow:
			hold = c.slowFor
		case faultKill:
			hold = c.replicaDowntime
		case faultEtcdKill, faultEtcdStop:
			hold = c.downtime + 10*time.Second // a graceful stop takes up to about 8s
		}
		if t+hold > c.duration {
			misses++
			continue
		}
		misses = 0
		ep := chaosEpisode{at: t, hold: hold, kind: kind}
		switch kind {
		case faultCut, faultSlow, faultKill, faultSigterm:
			ep.replica = victim % c.replicas
			victim++
		}
		out = append(out, ep)
		t += hold + c.chaosGap
	}
	return out
}

// chaosStats are the chaos schedule's figures.
type chaosStats struct {
	mu     sync.Mutex
	faults map[string]int
	// answers of the cut replica to the prober, by request and code.
	answers map[string]int
	// cutStale counts consistent LISTs the cut replica answered below a
	// revision etcd had committed before the call.
	cutStale                                  int
	messages                                  map[string]string // one error message for each probe code
	notReadyAfter, readyAfterHeal, newLeader  []time.Duration
	cutRelists                                []float64
	neverNotReady, neverReady, leaderUnagreed int
}

func newChaosStats() *chaosStats {
	return &chaosStats{faults: map[string]int{}, answers: map[string]int{}, messages: map[string]string{}}
}

func (s *chaosStats) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	relists := make([]string, len(s.cutRelists))
	for i, n := range s.cutRelists {
		relists[i] = fmt.Sprintf("%.0f", n)
	}
	n429or504 := 0
	for k, n := range s.answers {
		if strings.HasSuffix(k, ":429") || strings.HasSuffix(k, ":504") {
			n429or504 += n
		}
	}
	return fmt.Sprintf("faults={%s} cut_answers={%s} cut_429_504=%d cut_stale_consistent=%d cut_not_ready_after=%s cut_ready_after_heal=%s cut_cache_relists=%s new_leader_after=%s",
		mapString(s.faults), mapString(s.answers), n429or504,
		s.cutStale, durations(s.notReadyAfter, s.neverNotReady), durations(s.readyAfterHeal, s.neverReady), orDash(strings.Join(relists, ",")),
		durations(s.newLeader, s.leaderUnagreed))
}

// noteTime adds d to ds, or counts it in never when it is 0 (the thing
// timed never happened).
func (s *chaosStats) noteTime(ds *[]time.Duration, never *int, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d > 0 {
		*ds = append(*ds, d)
	} else {
		*never++
	}
}

func mapString(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s:%d", k, m[k])
	}
	return strings.Join(parts, ",")
}

// durations is "1.2s,3s", with "never" for each of never.
func durations(ds []time.Duration, never int) string {
	parts := make([]string, 0, len(ds)+never)
	for _, d := range ds {
		parts = append(parts, d.Round(100*time.Millisecond).String())
	}
	for range never {
		parts = append(parts, "never")
	}
	return orDash(strings.Join(parts, ","))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// chaosSchedule runs the plan.
func chaosSchedule(h *faultRunner, st *chaosStats, linRec *linRecorder, nkeys int, seen func() uint64) (err error) {
	defer func() {
		if e := h.wait(); e != nil && err == nil {
			err = e
		}
	}()
	start := time.Now()
	plan := planChaos(h.c)
	var kinds []string
	for _, ep := range plan {
		kinds = append(kinds, fmt.Sprintf("%v %s %v", ep.at, ep.kind, ep.hold.Round(time.Second)))
	}
	logf("chaos plan (seed %d): %s", h.c.seed, strings.Join(kinds, "; "))
	for _, ep := range plan {
		h.pause(time.Until(start.Add(ep.at)))
		if h.chaosCtx.Err() != nil {
			return nil
		}
		st.mu.Lock()
		st.faults[ep.kind]++
		st.mu.Unlock()
		switch ep.kind {
		case faultCut:
			h.cut(h.set.rs[ep.replica], ep.hold, st, linRec, nkeys, seen)
		case faultLeader, faultFollower:
			if err := h.isolate(ep.kind == faultLeader, ep.hold, st); err != nil {
				return err
			}
		case faultSlow:
			r := h.set.rs[ep.replica]
			f := netfault.Fault{Latency: h.c.slowLatency, Loss: h.c.slowLoss}
			logf("%s's links to etcd and its clients' link to it slowed (%v) for %v", r.name, f, ep.hold)
			r.links.set(f)
			r.front.Set(f)
			h.pause(ep.hold)
			r.links.set(netfault.Fault{})
			r.front.Set(netfault.Fault{})
			logf("%s's links healed", r.name)
		case faultKill:
			if err := h.killReplica(h.set.rs[ep.replica]); err != nil {
				return err
			}
		case faultSigterm:
			h.sigtermReplica(h.set.rs[ep.replica])
		case faultEtcdKill, faultEtcdStop:
			if err := h.etcdCrash(ep.kind == faultEtcdKill); err != nil {
				return err
			}
		}
	}
	<-h.chaosCtx.Done()
	return nil
}

// cut cuts r from etcd for hold, probing it meanwhile, then heals and
// waits until it is ready again.
func (h *faultRunner) cut(r *replica, hold time.Duration, st *chaosStats, linRec *linRecorder, nkeys int, seen func() uint64) {
	r.scrape(h.runCtx)
	_, relistsBefore := r.counters()
	logf("%s cut from every etcd member (blackhole) for %v", r.name, hold)
	r.links.set(netfault.Fault{Blackhole: true})
	t0 := time.Now()
	probeCtx, stopProbe := context.WithCancel(h.runCtx)
	var probes sync.WaitGroup
	var notReady time.Duration
	probes.Go(func() {
		for notReady == 0 && probeCtx.Err() == nil {
			if p := r.process(); p != nil {
				rctx, cancel := context.WithTimeout(probeCtx, 5*time.Second)
				code, _, err := p.Get(rctx, "/readyz")
				cancel()
				if err == nil && code != http.StatusOK {
					notReady = time.Since(t0)
				}
			}
			select {
			case <-probeCtx.Done():
			case <-time.After(time.Second):
			}
		}
	})
	// Every second, three requests, each waited for up to probeTimeout
	// (longer than the server's own 60s request timeout) even past the
	// heal: every request made during the cut gets counted by its answer.
	probes.Go(func() {
		inflight := make(chan struct{}, 64)
		for i := 0; probeCtx.Err() == nil; i++ {
			select {
			case inflight <- struct{}{}:
				h.probing.Go(func() {
					defer func() { <-inflight }()
					h.probe(r, i, st, linRec, nkeys, seen)
				})
			default: // 64 waiting already: this second's go unasked
			}
			select {
			case <-probeCtx.Done():
			case <-time.After(time.Second):
			}
		}
	})
	h.pause(hold)
	stopProbe()
	probes.Wait()
	r.links.set(netfault.Fault{})
	healed := time.Now()
	h.cutMu.Lock()
	h.healed++
	h.cutMu.Unlock()
	st.noteTime(&st.notReadyAfter, &st.neverNotReady, notReady)
	// Ready again: /readyz passes (within 3 minutes).
	var ready time.Duration
	for ready == 0 && time.Since(healed) < 3*time.Minute && h.runCtx.Err() == nil {
		if p := r.process(); p != nil {
			rctx, cancel := context.WithTimeout(h.runCtx, 5*time.Second)
			code, _, err := p.Get(rctx, "/readyz")
			cancel()
			if err == nil && code == http.StatusOK {
				ready = time.Since(healed)
				break
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Its caches' relists since the cut, once they had time to catch up.
	time.Sleep(5 * time.Second)
	r.scrape(h.runCtx)
	_, relistsAfter := r.counters()
	st.noteTime(&st.readyAfterHeal, &st.neverReady, ready)
	st.mu.Lock()
	st.cutRelists = append(st.cutRelists, relistsAfter-relistsBefore)
	st.mu.Unlock()
	logf("%s healed after %v cut (not ready after %v); ready %v after the heal; its caches relisted %.0f times",
		r.name, healed.Sub(t0).Round(100*time.Millisecond), notReady.Round(100*time.Millisecond), ready.Round(100*time.Millisecond), relistsAfter-relistsBefore)
}

// probeTimeout bounds a probe of a cut replica: past the server's own
// request timeout (60s), so the server's answer is what is counted.
const probeTimeout = 75 * time.Second

// probe asks the cut replica for a consistent LIST, a consistent GET and an
// RV "0" LIST of the linearizability widgets, at once; every answer is
// counted by code, and the answered ones join the linearizability history.
func (h *faultRunner) probe(r *replica, i int, st *chaosStats, linRec *linRecorder, nkeys int, seen func() uint64) {
	cs, up := r.client()
	if !up {
		return // being restarted: nobody would send it requests
	}
	widgets := cs.DemoV1alpha1().Widgets(linNamespace)
	client := 1000 + r.index
	var wg sync.WaitGroup
	for _, op := range []linOp{
		{client: client, replica: r.index, kind: linList, key: -1},
		{client: client, replica: r.index, kind: linGet, key: i % nkeys},
		{client: client, replica: r.index, kind: linList, key: -1, rv0: true},
	} {
		wg.Go(func() {
			name := linKindNames[op.kind]
			if op.rv0 {
				name += "-rv0"
			}
			ctx, cancel := context.WithTimeout(h.runCtx, probeTimeout)
			defer cancel()
			probeRec := newLinRecorder() // the failed read's code, alone
			code := "200"
			h.cutMu.Lock()
			healedBefore := h.healed
			h.cutMu.Unlock()
			if linDo(ctx, widgets, &op, nkeys, probeRec, seen) {
				linRec.add(op)
				if op.kind == linList && !op.rv0 && op.listRV < op.seen {
					st.mu.Lock()
					st.cutStale++
					st.mu.Unlock()
					logf("stale consistent read: %s answered a consistent LIST at RV %d, below revision %d etcd had at the call", r.name, op.listRV, op.seen)
				}
			} else {
				for c := range probeRec.errors {
					code = c
				}
				st.mu.Lock()
				if _, ok := st.messages[code]; !ok {
					st.messages[code] = probeRec.lastErr
				}
				st.mu.Unlock()
			}
			// Answers that came after the heal are counted apart: only what
			// the replica answered while cut says how it behaves cut.
			h.cutMu.Lock()
			if h.healed != healedBefore {
				code += "-after-heal"
			}
			h.cutMu.Unlock()
			st.mu.Lock()
			st.answers[name+":"+code]++
			st.mu.Unlock()
		})
	}
	wg.Wait()
}

// isolate cuts etcd's leader (or a follower) from its peers for hold, then
// heals.
func (h *faultRunner) isolate(leader bool, hold time.Duration, st *chaosStats) error {
	cluster := h.env.cluster
	i, what, err := h.etcdTarget(leader)
	if err != nil {
		return err
	}
	logf("etcd %s (member %d) cut from its peers (blackhole) for %v", what, i, hold)
	h.env.isolate(i, netfault.Fault{Blackhole: true})
	t0 := time.Now()
	if leader {
		var others []int
		for j := range cluster.Members {
			if j != i {
				others = append(others, j)
			}
		}
		elected := time.Duration(0)
		for time.Since(t0) < hold && h.chaosCtx.Err() == nil {
			if l := cluster.LeaderOf(h.runCtx, others...); l >= 0 && l != i {
				elected = time.Since(t0)
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		st.noteTime(&st.newLeader, &st.leaderUnagreed, elected)
		logf("etcd members %v agreed on a new leader %v after the cut", others, elected.Round(100*time.Millisecond))
	}
	h.pause(hold - time.Since(t0))
	h.env.healPeers()
	if l, err := cluster.WaitLeader(h.runCtx, time.Minute); err == nil {
		logf("etcd member %d's peer links healed; leader member %d", i, l)
	} else {
		logf("etcd member %d's peer links healed; %v", i, err)
	}
	return nil
}
