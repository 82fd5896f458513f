package bookmarks

import (
	"math/rand/v2"
	"time"

	"k8s.io/utils/clock"
)

// Tick is the one timer that drives a calendar's pops. Every interval is the
// period plus a random extra of up to jitter*period, drawn again on every
// Rearm, so the ticks of many resources and many apiservers do not line up.
// Upstream draws its tick with wait.Jitter(1s, 0.25), which only adds: the
// default interval lies in [1s, 1.25s). Unlike wait.Jitter, a jitter of 0 here
// means exactly the period rather than a factor of 1.0.
//
// The calendar's (X - granularity, X + granularity) bound assumes a pop at
// least once per granularity; a tick of period granularity with jitter j can
// add up to j*granularity on the late side, which is what upstream accepts for
// its default schedule too.
//
// Tick starts no goroutine: its owner selects on C and calls Rearm after each
// fire, and calls Stop when done.
type Tick struct {
	clock  clock.Clock
	period time.Duration
	jitter float64
	random func() float64 // in [0, 1)
	timer  clock.Timer
}

// NewTick arms a timer for the first interval.
func NewTick(clk clock.Clock, period time.Duration, jitter float64) *Tick {
	return newTick(clk, period, jitter, rand.Float64)
}

func newTick(clk clock.Clock, period time.Duration, jitter float64, random func() float64) *Tick {
	t := &Tick{clock: clk, period: period, jitter: jitter, random: random}
	t.timer = clk.NewTimer(t.interval())
	return t
}

// C fires once per interval; call Rearm after receiving from it.
func (t *Tick) C() <-chan time.Time { return t.timer.C() }

// Rearm starts the next interval with a fresh jitter. It must only be called
// after the previous fire was received from C.
func (t *Tick) Rearm() { t.timer.Reset(t.interval()) }

// Stop releases the timer.
func (t *Tick) Stop() { t.timer.Stop() }

func (t *Tick) interval() time.Duration {
	if t.jitter <= 0 {
		return t.period
	}
	return t.period + time.Duration(t.random()*t.jitter*float64(t.period))
}
