package feed

import "testing"

// TestBudgetGoesOverAndFitsAgainWithHysteresis: over only past the budget,
// back only at nine tenths of it, so a resource at the budget does not
// flap; a measure that knows no size keeps the last.
func TestBudgetGoesOverAndFitsAgainWithHysteresis(t *testing.T) {
	b := budget{max: 1000}
	steps := []struct {
		name         string
		measure      bool // measured (cached) or counted (over)
		count, avg   int64
		want, wantOv bool
	}{
		{"at the budget: not over", true, 10, 100, false, false},
		{"no size known yet: the last average", true, 11, 0, true, true},
		{"measured again while over: no second transition", true, 20, 100, false, true},
		{"counted at the budget: still over", false, 10, 0, false, true},
		{"counted at nine tenths: fits", false, 9, 0, true, false},
		{"counted while cached: nothing", false, 5, 0, false, false},
	}
	for _, s := range steps {
		var got bool
		if s.measure {
			got = b.measured(s.count, s.avg)
		} else {
			got = b.counted(s.count)
		}
		if got != s.want || b.over != s.wantOv {
			t.Fatalf("%s: transition %v over %v, want %v and %v (bytes %d)", s.name, got, b.over, s.want, s.wantOv, b.bytes())
		}
	}
}
