package bookmarks

import (
	"testing"
	"time"
)

func TestPolicyNext(t *testing.T) {
	now := epoch.Add(time.Hour)
	policy := Policy{Frequency: time.Minute, PreDeadlineOffset: 2 * time.Second}
	tests := []struct {
		name         string
		policy       Policy
		deadline     time.Time
		floorReached bool
		want         time.Time
		wantOK       bool
	}{
		{"floor not reached: due at once, even with a far deadline", policy, now.Add(time.Hour), false, now, true},
		{"floor not reached: due at once, even past the pre-deadline", policy, now.Add(time.Second), false, now, true},
		{"no deadline: heartbeat", policy, time.Time{}, true, now.Add(time.Minute), true},
		{"far deadline: heartbeat", policy, now.Add(30 * time.Minute), true, now.Add(time.Minute), true},
		{"deadline within a period: pre-deadline bookmark", policy, now.Add(30 * time.Second), true, now.Add(28 * time.Second), true},
		{"pre-deadline exactly now: still due", policy, now.Add(2 * time.Second), true, now, true},
		{"pre-deadline passed: never", policy, now.Add(time.Second), true, time.Time{}, false},
		{"deadline passed: never", policy, now.Add(-time.Second), true, time.Time{}, false},
		{"pre-deadline equal to heartbeat", policy, now.Add(62 * time.Second), true, now.Add(time.Minute), true},
		{"configured frequency", Policy{Frequency: 5 * time.Second, PreDeadlineOffset: time.Second}, now.Add(time.Minute), true, now.Add(5 * time.Second), true},
		{"configured offset", Policy{Frequency: time.Minute, PreDeadlineOffset: 10 * time.Second}, now.Add(40 * time.Second), true, now.Add(30 * time.Second), true},
		{"zero offset: bookmark at the deadline", Policy{Frequency: time.Minute}, now.Add(40 * time.Second), true, now.Add(40 * time.Second), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.policy.Next(now, tc.deadline, tc.floorReached)
			if ok != tc.wantOK || !got.Equal(tc.want) {
				t.Errorf("Next() = (%v, %v), want (%v, %v)", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestPolicyAfterBookmark(t *testing.T) {
	now := epoch.Add(time.Hour)
	policy := Policy{Frequency: time.Minute, PreDeadlineOffset: 2 * time.Second}
	g := time.Second
	for _, tc := range []struct {
		name     string
		deadline time.Time
		floor    bool
		want     time.Time
		wantOK   bool
	}{
		{"pre-deadline popped early, 0.5s ahead: it was this one", now.Add(2500 * time.Millisecond), true, time.Time{}, false},
		{"pre-deadline exactly now: it was this one", now.Add(2 * time.Second), true, time.Time{}, false},
		{"pre-deadline one granularity ahead: still to send", now.Add(3 * time.Second), true, now.Add(time.Second), true},
		{"pre-deadline far ahead", now.Add(30 * time.Second), true, now.Add(28 * time.Second), true},
		{"heartbeat", now.Add(time.Hour), true, now.Add(time.Minute), true},
		{"no deadline", time.Time{}, true, now.Add(time.Minute), true},
		{"floor not reached: due at once", now.Add(2500 * time.Millisecond), false, now, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := policy.AfterBookmark(now, tc.deadline, tc.floor, g)
			if ok != tc.wantOK || !got.Equal(tc.want) {
				t.Errorf("AfterBookmark() = (%v, %v), want (%v, %v)", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}
