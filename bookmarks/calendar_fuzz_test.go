package bookmarks

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

// Calendar fuzz input: two bytes of granularity, then operations of one
// opcode byte and up to two argument bytes each (missing bytes read as 0).
const (
	fuzzOpAdd         = iota // add the next watcher at now + int16 ms (negative: the past)
	fuzzOpAddZero            // add the next watcher at the zero time ("at once")
	fuzzOpStep               // step the clock by uint16 ms
	fuzzOpStepSlots          // step the clock by a whole number (one byte) of granularities: the same place in a later slot
	fuzzOpStepNano           // step the clock by one byte of nanoseconds: onto a slot edge from just below
	fuzzOpStepUnderMs        // step the clock by 1ms less one byte of nanoseconds: just below a slot edge
	fuzzOpPop                // PopDue into a fresh dst
	fuzzOpPopReuse           // PopDue into the previous result re-sliced to zero length
	fuzzOpCount

	fuzzMaxOps = 2000
)

func fuzzCalendarInput(granularityMs uint16, ops ...[]byte) []byte {
	in := binary.BigEndian.AppendUint16(nil, granularityMs)
	for _, op := range ops {
		in = append(in, op...)
	}
	return in
}

func fuzzAdd(offsetMs int16) []byte {
	return binary.BigEndian.AppendUint16([]byte{fuzzOpAdd}, uint16(offsetMs))
}

func fuzzStep(ms uint16) []byte { return binary.BigEndian.AppendUint16([]byte{fuzzOpStep}, ms) }

var (
	fuzzAddZero   = []byte{fuzzOpAddZero}
	fuzzPop       = []byte{fuzzOpPop}
	fuzzPopReuse  = []byte{fuzzOpPopReuse}
	fuzzStepSlots = func(n byte) []byte { return []byte{fuzzOpStepSlots, n} }
	fuzzStepNano  = func(n byte) []byte { return []byte{fuzzOpStepNano, n} }
	fuzzUnderMs   = func(n byte) []byte { return []byte{fuzzOpStepUnderMs, n} }
)

// fuzzStepRecord is one operation of a fuzz run, formatted only on failure.
type fuzzStepRecord struct {
	op  byte
	now time.Duration // the clock at the operation, from epoch
	id  int           // the watcher added
	d   time.Duration // the asked offset from epoch (adds) or the step
	ids []int         // the watchers popped
}

func (r fuzzStepRecord) String() string {
	switch r.op {
	case fuzzOpAdd:
		return fmt.Sprintf("at +%v: Add(%d, +%v)", r.now, r.id, r.d)
	case fuzzOpAddZero:
		return fmt.Sprintf("at +%v: Add(%d, zero time)", r.now, r.id)
	case fuzzOpStep, fuzzOpStepSlots, fuzzOpStepNano, fuzzOpStepUnderMs:
		return fmt.Sprintf("at +%v: Step(%v)", r.now, r.d)
	case fuzzOpPop, fuzzOpPopReuse:
		return fmt.Sprintf("at +%v: PopDue -> %v", r.now, r.ids)
	default:
		return fmt.Sprintf("at +%v: SetTime(+%v)", r.now, r.d)
	}
}

// fuzzWatcher is what the fuzz target knows of one added watcher.
type fuzzWatcher struct {
	asked    time.Time // the time passed to Add, or the add time for the zero time
	added    time.Time
	popped   bool
	poppedAt time.Time
}

// FuzzCalendar drives a Calendar[int] on a fake clock with a sequence of adds,
// clock steps and pops, and checks after every step that no watcher is lost,
// none fires twice, none comes out before (asked time - granularity) or before
// it was added, none is left behind once its slot has been popped, and Len
// counts exactly the watchers filed and not yet popped.
func FuzzCalendar(f *testing.F) {
	// Granularity 1s, a watcher exactly on a slot edge: not popped 1ns before
	// the edge, popped at the edge.
	f.Add(fuzzCalendarInput(999, fuzzAdd(1000), fuzzStep(999), fuzzUnderMs(1), fuzzPop, fuzzStepNano(1), fuzzPop))
	// Watchers 1ns either side of slot edges: one popped a granularity less
	// 1ns before its time (the most the bound allows), one 1ns before.
	f.Add(fuzzCalendarInput(999, fuzzStep(999), fuzzUnderMs(1), fuzzAdd(1000), fuzzAdd(0), fuzzStepNano(1), fuzzPop,
		fuzzStepNano(1), fuzzAdd(1000), fuzzStep(999), fuzzUnderMs(2), fuzzPop, fuzzStepNano(1), fuzzPopReuse))
	// Watchers in the past and at the zero time are clamped to the first unpopped slot.
	f.Add(fuzzCalendarInput(99, fuzzAdd(-5000), fuzzAddZero, fuzzPop, fuzzAdd(-1), fuzzAddZero, fuzzPop, fuzzStep(100), fuzzPop))
	// Added after this slot's pop, in the same slot: due in the next one, not lost.
	f.Add(fuzzCalendarInput(999, fuzzStep(500), fuzzPop, fuzzAdd(0), fuzzAdd(-400), fuzzPop, fuzzStep(499), fuzzPop, fuzzStep(1), fuzzPop))
	// A long idle gap: the late pop walks the filed slots, not the elapsed ones.
	f.Add(fuzzCalendarInput(0, fuzzAdd(3), fuzzAdd(30000), fuzzAdd(-30000), fuzzStepSlots(255), fuzzStepSlots(255), fuzzPop, fuzzAdd(7), fuzzStep(65535), fuzzPopReuse))
	// Many watchers in one slot, a pop with nothing due, and dst reuse.
	f.Add(fuzzCalendarInput(9, fuzzAdd(5), fuzzAdd(5), fuzzAdd(6), fuzzAdd(9), fuzzPop, fuzzStep(5), fuzzPopReuse, fuzzPopReuse, fuzzStep(10), fuzzPopReuse))
	// Large granularity, many steps smaller than a slot.
	f.Add(fuzzCalendarInput(65535, fuzzAdd(32767), fuzzAdd(-32768), fuzzStep(1), fuzzPop, fuzzStep(65534), fuzzPop, fuzzStep(1), fuzzPop, fuzzAdd(0), fuzzPop))
	// Empty input and a bare granularity: nothing to pop, nothing lost.
	f.Add([]byte{})
	f.Add([]byte{0xff})
	f.Add(fuzzCalendarInput(0, fuzzPop, fuzzPopReuse, fuzzStep(0), fuzzPop))

	f.Fuzz(func(t *testing.T, in []byte) {
		next := func(n int) []byte {
			out := make([]byte, n)
			copy(out, in)
			in = in[min(n, len(in)):]
			return out
		}
		// Granularity in [1ms, 65.536s].
		granularity := (time.Duration(binary.BigEndian.Uint16(next(2))) + 1) * time.Millisecond
		clk := testingclock.NewFakeClock(epoch)
		cal := NewCalendar[int](clk, granularity)
		if cal.Granularity() != granularity {
			t.Fatalf("Granularity() = %v, want %v", cal.Granularity(), granularity)
		}

		var (
			watchers []fuzzWatcher
			popped   int
			dst      [][]int
			trace    []fuzzStepRecord // the operations so far, for failure messages
		)
		fail := func(format string, args ...any) {
			t.Helper()
			var b strings.Builder
			for _, r := range trace {
				fmt.Fprintf(&b, "\n  %v", r)
			}
			t.Fatalf("granularity %v, operations:%s\n%s", granularity, b.String(), fmt.Sprintf(format, args...))
		}
		check := func() {
			t.Helper()
			if want := len(watchers) - popped; cal.Len() != want {
				fail("Len() = %d, want %d (added %d, popped %d)", cal.Len(), want, len(watchers), popped)
			}
		}
		pop := func(reuse bool) {
			t.Helper()
			now := clk.Now()
			if reuse {
				dst = cal.PopDue(dst[:0])
			} else {
				dst = cal.PopDue(nil)
			}
			var ids []int
			for _, slot := range dst {
				if len(slot) == 0 {
					fail("PopDue returned an empty slot")
				}
				ids = append(ids, slot...)
			}
			trace = append(trace, fuzzStepRecord{op: fuzzOpPop, now: now.Sub(epoch), ids: ids})
			for _, id := range ids {
				if id < 0 || id >= len(watchers) {
					fail("PopDue returned watcher %d, never added", id)
				}
				w := &watchers[id]
				if w.popped {
					fail("watcher %d fired twice: at +%v and at +%v", id, w.poppedAt.Sub(epoch), now.Sub(epoch))
				}
				if !now.After(w.asked.Add(-granularity)) {
					fail("watcher %d asked for +%v popped at +%v: earlier than asked - granularity (%v)", id, w.asked.Sub(epoch), now.Sub(epoch), granularity)
				}
				if now.Before(w.added) {
					fail("watcher %d added at +%v popped at +%v, before it was added", id, w.added.Sub(epoch), now.Sub(epoch))
				}
				w.popped, w.poppedAt = true, now
				popped++
			}
			// Nothing is left behind: after a pop at now, a watcher still
			// filed either asked for later than now, or was added less than a
			// granularity ago (after this slot's pop, so it waits for the next
			// slot).
			for id, w := range watchers {
				if !w.popped && !w.asked.After(now) && !w.added.After(now.Add(-granularity)) {
					fail("watcher %d asked for +%v, added at +%v, still filed after a pop at +%v", id, w.asked.Sub(epoch), w.added.Sub(epoch), now.Sub(epoch))
				}
			}
		}

		for ops := 0; len(in) > 0 && ops < fuzzMaxOps; ops++ {
			op := next(1)[0] % fuzzOpCount
			now := clk.Now()
			switch op {
			case fuzzOpAdd, fuzzOpAddZero:
				id := len(watchers)
				w := fuzzWatcher{asked: now, added: now}
				at := time.Time{}
				if op == fuzzOpAdd {
					offset := time.Duration(int16(binary.BigEndian.Uint16(next(2)))) * time.Millisecond
					at = now.Add(offset)
					w.asked = at
				}
				trace = append(trace, fuzzStepRecord{op: op, now: now.Sub(epoch), id: id, d: w.asked.Sub(epoch)})
				watchers = append(watchers, w)
				cal.Add(id, at)
			case fuzzOpStep:
				d := time.Duration(binary.BigEndian.Uint16(next(2))) * time.Millisecond
				clk.Step(d)
				trace = append(trace, fuzzStepRecord{op: op, now: now.Sub(epoch), d: d})
			case fuzzOpStepSlots:
				d := time.Duration(next(1)[0]) * granularity
				clk.Step(d)
				trace = append(trace, fuzzStepRecord{op: op, now: now.Sub(epoch), d: d})
			case fuzzOpStepNano:
				d := time.Duration(next(1)[0])
				clk.Step(d)
				trace = append(trace, fuzzStepRecord{op: op, now: now.Sub(epoch), d: d})
			case fuzzOpStepUnderMs:
				d := time.Millisecond - time.Duration(next(1)[0])
				clk.Step(d)
				trace = append(trace, fuzzStepRecord{op: op, now: now.Sub(epoch), d: d})
			case fuzzOpPop, fuzzOpPopReuse:
				pop(op == fuzzOpPopReuse)
			}
			check()
		}

		// Step past every asked time and pop: every watcher comes out.
		latest := clk.Now()
		for _, w := range watchers {
			if w.asked.After(latest) {
				latest = w.asked
			}
		}
		trace = append(trace, fuzzStepRecord{op: fuzzOpCount, now: clk.Now().Sub(epoch), d: latest.Add(granularity).Sub(epoch)})
		clk.SetTime(latest.Add(granularity))
		pop(false)
		check()
		for id, w := range watchers {
			if !w.popped {
				fail("watcher %d (asked for +%v, added at +%v) lost: never popped", id, w.asked.Sub(epoch), w.added.Sub(epoch))
			}
		}
		if cal.Len() != 0 || len(cal.Slots()) != 0 {
			fail("after every watcher popped: Len() = %d, Slots() = %v", cal.Len(), cal.Slots())
		}
	})
}
