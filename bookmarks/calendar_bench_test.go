package bookmarks

import (
	"fmt"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

const benchSlots = 60

type benchWatcher struct{ id int }

// BenchmarkCalendarAdd files 100,000 watchers over 60 one-second slots per
// iteration, the shape of a minute's heartbeat at 100k watchers.
func BenchmarkCalendarAdd(b *testing.B) {
	const watchers = 100_000
	ws := make([]*benchWatcher, watchers)
	for i := range ws {
		ws[i] = &benchWatcher{id: i}
	}
	clk := testingclock.NewFakeClock(epoch)
	b.ReportAllocs()
	for b.Loop() {
		cal := NewCalendar[*benchWatcher](clk, time.Second)
		for i, w := range ws {
			cal.Add(w, epoch.Add(time.Duration(i%benchSlots)*time.Second))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*watchers), "ns/add")
}

// BenchmarkCalendarPopDue is the steady state of 100,000 watchers over 60
// slots: each op is one tick that pops the due slot (about 1,667 watchers) and
// files them one period later, as the cacher does. Popping alone cannot be
// timed apart: refilling 100,000 watchers outside the timer costs thousands of
// times more than the pop and would make the benchmark run for minutes.
func BenchmarkCalendarPopDue(b *testing.B) {
	const watchers = 100_000
	clk := testingclock.NewFakeClock(epoch)
	cal := NewCalendar[*benchWatcher](clk, time.Second)
	for i := range watchers {
		cal.Add(&benchWatcher{id: i}, epoch.Add(time.Duration(i%benchSlots)*time.Second))
	}
	var buf [][]*benchWatcher
	adds := 0
	b.ReportAllocs()
	for b.Loop() {
		buf = cal.PopDue(buf[:0])
		next := clk.Now().Add(benchSlots * time.Second)
		for _, slot := range buf {
			for _, w := range slot {
				cal.Add(w, next)
				adds++
			}
		}
		clk.Step(time.Second)
	}
	b.ReportMetric(float64(adds)/float64(b.N), "watchers/op")
}

// BenchmarkCalendarPopDueIdle pops with nothing due: the cost must not depend
// on how many watchers are filed.
func BenchmarkCalendarPopDueIdle(b *testing.B) {
	for _, watchers := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("watchers=%d", watchers), func(b *testing.B) {
			clk := testingclock.NewFakeClock(epoch)
			cal := NewCalendar[*benchWatcher](clk, time.Second)
			for i := range watchers {
				cal.Add(&benchWatcher{id: i}, epoch.Add(time.Duration(1+i%benchSlots)*time.Second))
			}
			cal.PopDue(nil) // slot 0 is now behind the watermark
			var buf [][]*benchWatcher
			b.ReportAllocs()
			for b.Loop() {
				buf = cal.PopDue(buf[:0])
			}
			if len(buf) != 0 || cal.Len() != watchers {
				b.Fatalf("idle pop handed out %d slots, %d filed", len(buf), cal.Len())
			}
		})
	}
}
