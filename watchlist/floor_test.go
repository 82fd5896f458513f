package watchlist

import "testing"

func TestFloor(t *testing.T) {
	tests := []struct {
		name                            string
		requested                       string
		parsed, required, current, want uint64
	}{
		{"no RV: the RV the cache was required to reach", "", 0, 120, 130, 120},
		{"no RV and nothing required", "", 0, 0, 130, 0},
		{"RV 0: the cache's current RV", "0", 0, 120, 130, 130},
		{"exact RV: the requested one", "100", 100, 120, 130, 100},
		{"exact RV above the cache", "500", 500, 0, 130, 500},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Floor(tc.requested, tc.parsed, tc.required, tc.current); got != tc.want {
				t.Errorf("Floor(%q, %d, %d, %d) = %d, want %d", tc.requested, tc.parsed, tc.required, tc.current, got, tc.want)
			}
		})
	}
}
