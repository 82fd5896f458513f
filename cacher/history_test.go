package cacher

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/watch"
)

var historyEpoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func historyEvent(rv uint64, at time.Time) *event {
	return &event{typ: watch.Modified, rv: rv, recordedNanos: at.UnixNano()}
}

func eventRVs(events []*event) []uint64 {
	var out []uint64
	for _, e := range events {
		out = append(out, e.rv)
	}
	return out
}

// historyRVs is every retained RV, oldest first, read through since.
func historyRVs(t *testing.T, h *history) []uint64 {
	t.Helper()
	events, ok := h.since(h.startRV)
	if !ok {
		t.Fatalf("since(startRV=%d) = false: the history does not cover its own start", h.startRV)
	}
	if len(events) != h.len() {
		t.Fatalf("since(startRV) returned %d events, len() = %d", len(events), h.len())
	}
	return eventRVs(events)
}

func seq(from, to uint64) []uint64 {
	var out []uint64
	for rv := from; rv <= to; rv++ {
		out = append(out, rv)
	}
	return out
}

func TestHistoryExpire(t *testing.T) {
	const window = 10 * time.Second
	// Events 101..104 recorded at +0s, +2s, +5s, +9s after the epoch.
	offsets := []time.Duration{0, 2 * time.Second, 5 * time.Second, 9 * time.Second}
	tests := []struct {
		name        string
		now         time.Duration
		wantRVs     []uint64
		wantStartRV uint64
	}{
		{name: "all younger than the window", now: 9 * time.Second, wantRVs: seq(101, 104), wantStartRV: 100},
		{name: "older than the window is dropped", now: 11 * time.Second, wantRVs: seq(102, 104), wantStartRV: 101},
		{name: "exactly the window old is kept", now: 12 * time.Second, wantRVs: seq(102, 104), wantStartRV: 101},
		{name: "just past the window is dropped", now: 12*time.Second + time.Nanosecond, wantRVs: seq(103, 104), wantStartRV: 102},
		{name: "several at once", now: 15500 * time.Millisecond, wantRVs: seq(104, 104), wantStartRV: 103},
		{name: "everything", now: time.Hour, wantRVs: nil, wantStartRV: 104},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHistory(window, 100)
			h.reset(100)
			for i, off := range offsets {
				if h.add(historyEvent(uint64(101+i), historyEpoch.Add(off)), historyEpoch.Add(off)) {
					t.Fatalf("add %d reported a forced eviction below capacity", 101+i)
				}
			}
			h.expire(historyEpoch.Add(tc.now))
			if diff := cmp.Diff(tc.wantRVs, historyRVs(t, h)); diff != "" {
				t.Errorf("retained RVs (-want +got):\n%s", diff)
			}
			if h.startRV != tc.wantStartRV {
				t.Errorf("startRV = %d, want %d (the RV of the last evicted event)", h.startRV, tc.wantStartRV)
			}
		})
	}
}

func TestHistoryCapacityEviction(t *testing.T) {
	const window = 10 * time.Second
	tests := []struct {
		name string
		// the oldest of the three events was recorded at the epoch; the
		// fourth is added at epoch+addAt.
		addAt      time.Duration
		wantForced bool
	}{
		{name: "evicted event younger than the window", addAt: 5 * time.Second, wantForced: true},
		{name: "evicted event a nanosecond younger than the window", addAt: window - time.Nanosecond, wantForced: true},
		{name: "evicted event exactly the window old", addAt: window, wantForced: false},
		{name: "evicted event older than the window", addAt: 20 * time.Second, wantForced: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHistory(window, 3)
			h.reset(100)
			for i := range 3 {
				at := historyEpoch.Add(time.Duration(i) * time.Millisecond)
				if h.add(historyEvent(uint64(101+i), at), at) {
					t.Fatalf("add %d reported a forced eviction below capacity", 101+i)
				}
			}
			now := historyEpoch.Add(tc.addAt)
			if got := h.add(historyEvent(104, now), now); got != tc.wantForced {
				t.Errorf("add at capacity: forced = %v, want %v", got, tc.wantForced)
			}
			if diff := cmp.Diff(seq(102, 104), historyRVs(t, h)); diff != "" {
				t.Errorf("retained RVs (-want +got):\n%s", diff)
			}
			if h.startRV != 101 {
				t.Errorf("startRV = %d, want 101 (the evicted event)", h.startRV)
			}
			if _, ok := h.since(100); ok {
				t.Errorf("since(100) = true after event 101 was evicted")
			}
		})
	}
}

func TestHistorySince(t *testing.T) {
	build := func() *history {
		h := newHistory(time.Hour, 100)
		h.reset(100)
		for _, rv := range []uint64{101, 102, 105, 110} {
			h.add(historyEvent(rv, historyEpoch), historyEpoch)
		}
		return h
	}
	tests := []struct {
		name   string
		rv     uint64
		want   []uint64
		wantOK bool
	}{
		{name: "below the start", rv: 99, wantOK: false},
		{name: "far below the start", rv: 1, wantOK: false},
		{name: "the start itself", rv: 100, want: []uint64{101, 102, 105, 110}, wantOK: true},
		{name: "an event's RV excludes it", rv: 102, want: []uint64{105, 110}, wantOK: true},
		{name: "between events", rv: 103, want: []uint64{105, 110}, wantOK: true},
		{name: "between the last two", rv: 107, want: []uint64{110}, wantOK: true},
		{name: "the newest", rv: 110, want: nil, wantOK: true},
		{name: "ahead of the newest", rv: 200, want: nil, wantOK: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := build()
			got, ok := h.since(tc.rv)
			if ok != tc.wantOK {
				t.Fatalf("since(%d) ok = %v, want %v", tc.rv, ok, tc.wantOK)
			}
			if !ok {
				return
			}
			if diff := cmp.Diff(tc.want, eventRVs(got)); diff != "" {
				t.Errorf("since(%d) (-want +got):\n%s", tc.rv, diff)
			}
		})
	}
}

func TestHistoryForget(t *testing.T) {
	tests := []struct {
		name        string
		compactRV   uint64
		wantRVs     []uint64
		wantStartRV uint64
	}{
		{name: "below the start changes nothing", compactRV: 99, wantRVs: []uint64{101, 102, 105, 110}, wantStartRV: 100},
		{name: "at the start changes nothing", compactRV: 100, wantRVs: []uint64{101, 102, 105, 110}, wantStartRV: 100},
		{name: "at an event drops it and everything older", compactRV: 102, wantRVs: []uint64{105, 110}, wantStartRV: 102},
		{name: "between events", compactRV: 107, wantRVs: []uint64{110}, wantStartRV: 105},
		{name: "at the newest", compactRV: 110, wantRVs: nil, wantStartRV: 110},
		{name: "past the newest moves the start to the compaction", compactRV: 200, wantRVs: nil, wantStartRV: 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHistory(time.Hour, 100)
			h.reset(100)
			for _, rv := range []uint64{101, 102, 105, 110} {
				h.add(historyEvent(rv, historyEpoch), historyEpoch)
			}
			h.forget(tc.compactRV)
			if diff := cmp.Diff(tc.wantRVs, historyRVs(t, h)); diff != "" {
				t.Errorf("retained RVs (-want +got):\n%s", diff)
			}
			if h.startRV != tc.wantStartRV {
				t.Errorf("startRV = %d, want %d", h.startRV, tc.wantStartRV)
			}
			// Whatever etcd compacted must not be served from memory.
			for _, e := range mustSince(t, h, h.startRV) {
				if e.rv <= tc.compactRV {
					t.Errorf("event %d at or below the compaction %d is still served", e.rv, tc.compactRV)
				}
			}
			if _, ok := h.since(99); ok {
				t.Errorf("since(99) = true: forget moved the start backwards")
			}
		})
	}
}

func mustSince(t *testing.T, h *history, rv uint64) []*event {
	t.Helper()
	events, ok := h.since(rv)
	if !ok {
		t.Fatalf("since(%d) = false (startRV %d)", rv, h.startRV)
	}
	return events
}

func TestHistoryReset(t *testing.T) {
	h := newHistory(time.Hour, 4)
	h.reset(100)
	for rv := uint64(101); rv <= 110; rv++ {
		h.add(historyEvent(rv, historyEpoch), historyEpoch)
	}
	h.reset(500)
	if h.len() != 0 {
		t.Fatalf("len() = %d after reset, want 0", h.len())
	}
	if _, ok := h.since(499); ok {
		t.Errorf("since(499) = true after reset(500)")
	}
	if got := mustSince(t, h, 500); len(got) != 0 {
		t.Errorf("since(500) after reset = %v, want none", eventRVs(got))
	}
	if o, n := h.span(); o != nil || n != nil {
		t.Errorf("span() after reset = %v, %v, want nil, nil", o, n)
	}
	// The history works again, from the new start, up to capacity.
	for rv := uint64(501); rv <= 506; rv++ {
		h.add(historyEvent(rv, historyEpoch), historyEpoch)
	}
	if diff := cmp.Diff(seq(503, 506), historyRVs(t, h)); diff != "" {
		t.Errorf("retained RVs after refilling (-want +got):\n%s", diff)
	}
	if h.startRV != 502 {
		t.Errorf("startRV = %d, want 502", h.startRV)
	}
}

// Filling the ring past its capacity several times, with the head at every
// position, keeps the newest capacity events in order.
func TestHistoryRingWrapAround(t *testing.T) {
	for _, capacity := range []int{1, 2, 3, 5, 15, 16, 17, 33, 100} {
		t.Run(fmt.Sprintf("capacity=%d", capacity), func(t *testing.T) {
			h := newHistory(time.Hour, capacity)
			h.reset(0)
			total := uint64(3*capacity + 2)
			for rv := uint64(1); rv <= total; rv++ {
				h.add(historyEvent(rv, historyEpoch), historyEpoch)
				kept := min(rv, uint64(capacity))
				if h.len() != int(kept) {
					t.Fatalf("after %d adds len() = %d, want %d", rv, h.len(), kept)
				}
				if diff := cmp.Diff(seq(rv-kept+1, rv), historyRVs(t, h)); diff != "" {
					t.Fatalf("after %d adds (-want +got):\n%s", rv, diff)
				}
				if h.startRV != rv-kept {
					t.Fatalf("after %d adds startRV = %d, want %d", rv, h.startRV, rv-kept)
				}
				if len(h.ring) > capacity {
					t.Fatalf("ring of %d slots exceeds the capacity %d", len(h.ring), capacity)
				}
			}
			oldest, newest := h.span()
			if oldest.rv != total-uint64(capacity)+1 || newest.rv != total {
				t.Errorf("span() = %d..%d, want %d..%d", oldest.rv, newest.rv, total-uint64(capacity)+1, total)
			}
		})
	}
}

// Growing a ring whose head is not at index 0 (events expired, then more
// added until it wraps) keeps the order.
func TestHistoryGrowWrappedRing(t *testing.T) {
	const window = 10 * time.Second
	h := newHistory(window, 1000)
	h.reset(0)
	for rv := uint64(1); rv <= 16; rv++ {
		at := historyEpoch
		if rv > 10 {
			at = historyEpoch.Add(5 * time.Second)
		}
		h.add(historyEvent(rv, at), at)
	}
	h.expire(historyEpoch.Add(12 * time.Second)) // drops 1..10: the head moves to slot 10
	if diff := cmp.Diff(seq(11, 16), historyRVs(t, h)); diff != "" {
		t.Fatalf("after expiry (-want +got):\n%s", diff)
	}
	now := historyEpoch.Add(12 * time.Second)
	for rv := uint64(17); rv <= 60; rv++ { // wraps at 26, grows at 27 and 43
		h.add(historyEvent(rv, now), now)
		if diff := cmp.Diff(seq(11, rv), historyRVs(t, h)); diff != "" {
			t.Fatalf("after adding %d (-want +got):\n%s", rv, diff)
		}
	}
}

// A burst that aged out gives its memory back, and the events left keep
// their order through the shrink and later wrap-arounds.
func TestHistoryShrinkKeepsOrder(t *testing.T) {
	const window = 10 * time.Second
	h := newHistory(window, 100_000)
	h.reset(0)
	for rv := uint64(1); rv <= 3000; rv++ {
		h.add(historyEvent(rv, historyEpoch), historyEpoch)
	}
	later := historyEpoch.Add(20 * time.Second)
	for rv := uint64(3001); rv <= 3200; rv++ {
		h.add(historyEvent(rv, later), later)
	}
	grown := len(h.ring)
	if grown < 3200 {
		t.Fatalf("ring has %d slots for 3200 events", grown)
	}
	h.expire(historyEpoch.Add(25 * time.Second)) // drops 1..3000
	if diff := cmp.Diff(seq(3001, 3200), historyRVs(t, h)); diff != "" {
		t.Fatalf("after the burst expired (-want +got):\n%s", diff)
	}
	if len(h.ring) >= grown {
		t.Errorf("ring still has %d slots for %d events after the burst expired", len(h.ring), h.len())
	}
	if h.startRV != 3000 {
		t.Errorf("startRV = %d, want 3000", h.startRV)
	}
	// Shrink again on later expiries, and keep taking events in order.
	for range 5 {
		h.expire(later)
	}
	if len(h.ring) > 1024 {
		t.Errorf("ring has %d slots for %d events after repeated expiries", len(h.ring), h.len())
	}
	for rv := uint64(3201); rv <= 5000; rv++ {
		h.add(historyEvent(rv, later), later)
	}
	if diff := cmp.Diff(seq(3001, 5000), historyRVs(t, h)); diff != "" {
		t.Fatalf("after refilling past the shrunk ring (-want +got):\n%s", diff)
	}
	// Finally evict from the middle of a wrapped ring by compaction.
	h.forget(4321)
	got := historyRVs(t, h)
	if !slices.Equal(got, seq(4322, 5000)) {
		t.Errorf("after forget(4321) retained %d..%d (%d events), want 4322..5000", got[0], got[len(got)-1], len(got))
	}
}
