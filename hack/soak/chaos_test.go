package main

import (
	"slices"
	"testing"
	"time"
)

// The plan is the same for the same seed (both caches get the same faults
// at the same times), every fault heals before the run ends, and none
// overlaps the next.
func TestPlanChaos(t *testing.T) {
	c := config{duration: 10 * time.Minute, replicas: 3, chaosFaults: allChaosFaults, chaosGap: 15 * time.Second,
		cutMin: 30 * time.Second, cutMax: 90 * time.Second, isolation: 30 * time.Second, slowFor: 2 * time.Minute,
		replicaDowntime: 5 * time.Second, downtime: 2 * time.Second, seed: 7}
	plan := planChaos(c)
	if again := planChaos(c); !slices.Equal(plan, again) {
		t.Fatalf("two plans from one seed differ:\n%v\n%v", plan, again)
	}
	kinds := map[string]int{}
	var end time.Duration
	for _, ep := range plan {
		kinds[ep.kind]++
		if ep.at < end+c.chaosGap {
			t.Errorf("%v starts at %v, before the previous fault healed (%v) and the gap", ep.kind, ep.at, end)
		}
		end = ep.at + ep.hold
		if end > c.duration {
			t.Errorf("%v heals at %v, after the run's end", ep.kind, end)
		}
		if ep.kind == faultCut && (ep.hold < c.cutMin || ep.hold > c.cutMax) {
			t.Errorf("a cut of %v, outside [%v, %v]", ep.hold, c.cutMin, c.cutMax)
		}
	}
	for _, k := range allChaosFaults {
		if kinds[k] == 0 {
			t.Errorf("10 minutes without a %s: %v", k, plan)
		}
	}
	c.seed = 8
	if other := planChaos(c); slices.Equal(plan, other) {
		t.Error("another seed, the same plan")
	}
	// A short run keeps what fits: no slow link of 2 minutes in 3.
	c.duration = 3 * time.Minute
	for _, ep := range planChaos(c) {
		if ep.kind == faultSlow {
			t.Errorf("a slow link of %v in a 3-minute run", ep.hold)
		}
	}
}
