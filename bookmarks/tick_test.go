package bookmarks

import (
	"fmt"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

func TestTickInterval(t *testing.T) {
	tests := []struct {
		period time.Duration
		jitter float64
		random float64
		want   time.Duration
	}{
		{time.Second, 0.25, 0, time.Second},
		{time.Second, 0.25, 0.5, 1125 * time.Millisecond},
		{time.Second, 0.25, 0.999999, 1249999750 * time.Nanosecond},
		{time.Second, 0, 0.9, time.Second},    // wait.Jitter would make this 1.9s
		{time.Second, -0.5, 0.9, time.Second}, // invalid input never widens the tick
		{2 * time.Second, 0.5, 0.5, 2500 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%v*%v@%v", tc.period, tc.jitter, tc.random), func(t *testing.T) {
			clk := testingclock.NewFakeClock(epoch)
			tick := newTick(clk, tc.period, tc.jitter, func() float64 { return tc.random })
			defer tick.Stop()
			if got := tick.interval(); got != tc.want {
				t.Errorf("interval() = %v, want %v", got, tc.want)
			}
		})
	}
}

// The timer fires after the jittered interval and not before, and every Rearm
// draws a fresh jitter.
func TestTickFiresAndRejitters(t *testing.T) {
	clk := testingclock.NewFakeClock(epoch)
	draws := []float64{0.2, 0.8, 0, 0.5}
	i := 0
	tick := newTick(clk, time.Second, 0.25, func() float64 { r := draws[i]; i++; return r })
	defer tick.Stop()
	for _, want := range []time.Duration{1050 * time.Millisecond, 1200 * time.Millisecond, time.Second} {
		clk.Step(want - time.Millisecond)
		select {
		case <-tick.C():
			t.Fatalf("fired before %v", want)
		default:
		}
		clk.Step(time.Millisecond)
		select {
		case <-tick.C():
		default:
			t.Fatalf("did not fire at %v", want)
		}
		tick.Rearm()
	}
	if i != len(draws) {
		t.Errorf("drew jitter %d times, want %d", i, len(draws))
	}
}

// The default tick draws from upstream's [1s, 1.25s).
func TestTickDefaultRange(t *testing.T) {
	clk := testingclock.NewFakeClock(epoch)
	tick := NewTick(clk, time.Second, 0.25) // upstream's wait.Jitter(time.Second, 0.25)
	defer tick.Stop()
	low, high := time.Hour, time.Duration(0)
	for range 10000 {
		d := tick.interval()
		low, high = min(low, d), max(high, d)
	}
	if low < time.Second || high >= 1250*time.Millisecond {
		t.Errorf("intervals in [%v, %v], want within [1s, 1.25s)", low, high)
	}
	if high-low < 200*time.Millisecond {
		t.Errorf("intervals in [%v, %v]: jitter is not spreading ticks", low, high)
	}
}
