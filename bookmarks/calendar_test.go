package bookmarks

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	testingclock "k8s.io/utils/clock/testing"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func flatten[W any](slots [][]W) []W {
	var out []W
	for _, s := range slots {
		out = append(out, s...)
	}
	return out
}

func TestCalendarFilesBySlot(t *testing.T) {
	tests := []struct {
		name        string
		granularity time.Duration
		add         map[int]time.Duration // watcher -> offset from creation
		popAt       time.Duration
		want        []int
		wantLeft    int
	}{
		{
			name:        "nothing due before the first slot ends",
			granularity: time.Second,
			add:         map[int]time.Duration{1: 1500 * time.Millisecond},
			popAt:       999 * time.Millisecond,
			want:        nil,
			wantLeft:    1,
		},
		{
			name:        "a slot pops as soon as it starts",
			granularity: time.Second,
			add:         map[int]time.Duration{1: 1500 * time.Millisecond},
			popAt:       time.Second,
			want:        []int{1},
		},
		{
			name:        "every expired slot pops, oldest first, later ones stay",
			granularity: time.Second,
			add:         map[int]time.Duration{1: 3 * time.Second, 2: time.Second, 3: 2 * time.Second, 4: 10 * time.Second},
			popAt:       3*time.Second + time.Millisecond,
			want:        []int{2, 3, 1},
			wantLeft:    1,
		},
		{
			name:        "slots follow the configured granularity",
			granularity: 5 * time.Second,
			add:         map[int]time.Duration{1: 4 * time.Second, 2: 6 * time.Second, 3: 9999 * time.Millisecond},
			popAt:       4 * time.Second,
			want:        []int{1},
			wantLeft:    2,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := testingclock.NewFakeClock(epoch)
			cal := NewCalendar[int](clk, tc.granularity)
			ids := make([]int, 0, len(tc.add))
			for id := range tc.add {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			for _, id := range ids {
				cal.Add(id, epoch.Add(tc.add[id]))
			}
			clk.SetTime(epoch.Add(tc.popAt))
			got := flatten(cal.PopDue(nil))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("popped (-want +got):\n%s", diff)
			}
			if cal.Len() != tc.wantLeft {
				t.Errorf("Len() = %d, want %d", cal.Len(), tc.wantLeft)
			}
		})
	}
}

func TestCalendarClampsPastTimesToTheNextUnpoppedSlot(t *testing.T) {
	tests := []struct {
		name string
		at   func(now time.Time) time.Time
	}{
		{"zero time", func(time.Time) time.Time { return time.Time{} }},
		{"before creation", func(time.Time) time.Time { return epoch.Add(-time.Hour) }},
		{"a slot already popped", func(now time.Time) time.Time { return now.Add(-2 * time.Second) }},
		{"now, after this slot popped", func(now time.Time) time.Time { return now }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := testingclock.NewFakeClock(epoch.Add(5*time.Second + 100*time.Millisecond))
			cal := NewCalendar[string](clk, time.Second)
			clk.SetTime(epoch.Add(10*time.Second + 100*time.Millisecond))
			if got := cal.PopDue(nil); len(got) != 0 {
				t.Fatalf("empty calendar popped %v", got)
			}
			cal.Add("w", tc.at(clk.Now()))
			if cal.Len() != 1 {
				t.Fatalf("watcher lost: Len() = %d", cal.Len())
			}
			// The current slot is already popped, so the watcher is due in the next.
			if got := flatten(cal.PopDue(nil)); len(got) != 0 {
				t.Fatalf("popped %v again in the slot that was already popped", got)
			}
			clk.Step(time.Second)
			if got := flatten(cal.PopDue(nil)); !slices.Equal(got, []string{"w"}) {
				t.Fatalf("popped %v one slot later, want [w]", got)
			}
			clk.Step(time.Second)
			if got := flatten(cal.PopDue(nil)); len(got) != 0 {
				t.Fatalf("watcher fired twice: %v", got)
			}
		})
	}
}

// A bookmark asked for at X arrives within (X - granularity, X + granularity)
// when the calendar is polled at least once per granularity.
func TestCalendarDeliversWithinOneGranularityOfTheAskedTime(t *testing.T) {
	for _, granularity := range []time.Duration{time.Second, 250 * time.Millisecond, 5 * time.Second} {
		for _, poll := range []time.Duration{granularity, granularity / 3, granularity/2 + 7*time.Millisecond} {
			t.Run(fmt.Sprintf("granularity=%v/poll=%v", granularity, poll), func(t *testing.T) {
				clk := testingclock.NewFakeClock(epoch)
				cal := NewCalendar[int](clk, granularity)
				asked := map[int]time.Time{}
				// Ask for times spread over ten slots at an awkward step, so asks land
				// at the start, middle and end of slots.
				step := granularity / 7
				for i := 1; i <= 70; i++ {
					at := epoch.Add(time.Duration(i)*step + time.Duration(i%3)*time.Millisecond)
					asked[i] = at
					cal.Add(i, at)
				}
				var buf [][]int
				for clk.Now().Before(epoch.Add(12 * granularity)) {
					clk.Step(poll)
					buf = cal.PopDue(buf[:0])
					now := clk.Now()
					for _, id := range flatten(buf) {
						x := asked[id]
						if !now.After(x.Add(-granularity)) || !now.Before(x.Add(granularity)) {
							t.Errorf("watcher %d asked for %v arrived at %v: outside (X-g, X+g)", id, x.Sub(epoch), now.Sub(epoch))
						}
						delete(asked, id)
					}
				}
				if len(asked) != 0 {
					t.Errorf("%d watchers never popped", len(asked))
				}
			})
		}
	}
}

func TestCalendarLatePopWalksOnlyFiledSlots(t *testing.T) {
	clk := testingclock.NewFakeClock(epoch)
	cal := NewCalendar[int](clk, time.Second)
	cal.Add(3, epoch.Add(30*time.Second))
	cal.Add(1, epoch.Add(10*time.Second))
	cal.Add(2, epoch.Add(20*time.Second))
	cal.Add(4, epoch.Add(48*time.Hour))
	// A week without a pop: the scan path must still hand out slots oldest first
	// and keep the future one.
	clk.Step(7 * 24 * time.Hour)
	if got := flatten(cal.PopDue(nil)); !slices.Equal(got, []int{1, 2, 3, 4}) {
		t.Fatalf("popped %v, want [1 2 3 4]", got)
	}
	cal.Add(5, time.Time{})
	clk.Step(time.Second)
	if got := flatten(cal.PopDue(nil)); !slices.Equal(got, []int{5}) {
		t.Fatalf("after a late pop, popped %v, want [5]", got)
	}
}

func TestCalendarSlots(t *testing.T) {
	clk := testingclock.NewFakeClock(epoch)
	cal := NewCalendar[int](clk, 2*time.Second)
	cal.Add(1, epoch.Add(5*time.Second))
	cal.Add(2, epoch.Add(4*time.Second))
	cal.Add(3, epoch.Add(1*time.Second))
	want := []SlotCount{{Start: epoch, Watchers: 1}, {Start: epoch.Add(4 * time.Second), Watchers: 2}}
	if diff := cmp.Diff(want, cal.Slots()); diff != "" {
		t.Errorf("Slots() (-want +got):\n%s", diff)
	}
}

func TestHasDueBy(t *testing.T) {
	g := time.Second
	for _, tc := range []struct {
		name  string
		filed []time.Duration // offsets from creation
		popAt time.Duration   // a PopDue at this offset first (-1: none)
		at    time.Duration
		want  bool
	}{
		{"empty", nil, -1, time.Hour, false},
		{"filed in the slot asked about", []time.Duration{3 * g}, -1, 3*g + g/2, true},
		{"filed one slot later", []time.Duration{4 * g}, -1, 3*g + g/2, false},
		{"filed earlier, not popped", []time.Duration{g}, -1, 3 * g, true},
		{"popped already", []time.Duration{g}, 2 * g, 2*g + g/2, false},
		{"far ahead asked, few filed (scan path)", []time.Duration{10 * g, 500 * g}, -1, 400 * g, true},
		{"far ahead asked, none due (scan path)", []time.Duration{500 * g}, -1, 400 * g, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := testingclock.NewFakeClock(time.Unix(0, 0))
			c := NewCalendar[int](clk, g)
			start := clk.Now()
			for i, d := range tc.filed {
				c.Add(i, start.Add(d))
			}
			if tc.popAt >= 0 {
				clk.SetTime(start.Add(tc.popAt))
				c.PopDue(nil)
			}
			if got := c.HasDueBy(start.Add(tc.at)); got != tc.want {
				t.Fatalf("HasDueBy(+%v) = %v, want %v", tc.at, got, tc.want)
			}
			// It agrees with what PopDue at that time hands out.
			clk.SetTime(start.Add(tc.at))
			if popped := len(c.PopDue(nil)) > 0; popped != tc.want {
				t.Fatalf("PopDue at +%v handed out watchers: %v, HasDueBy said %v", tc.at, popped, tc.want)
			}
		})
	}
}

// A zero granularity is a mistake of the caller (options validate the
// flag), not a default: it is refused loudly.
func TestCalendarRefusesZeroGranularity(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("NewCalendar with granularity 0 did not panic")
		}
	}()
	NewCalendar[int](testingclock.NewFakeClock(epoch), 0)
}
