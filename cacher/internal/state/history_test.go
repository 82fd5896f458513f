package state

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"
	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
)

var historyEpoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func historyEvent(rv uint64, at time.Time) *objects.Event {
	return &objects.Event{Type: watch.Modified, RV: rv, RecordedNanos: at.UnixNano()}
}

func eventRVs(events []*objects.Event) []uint64 {
	var out []uint64
	for _, e := range events {
		out = append(out, e.RV)
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

// Age alone evicts nothing: an old event stays resumable until a new one
// needs its room, as in upstream's cache (issue 11: never a 410 where
// upstream would resume).
func TestHistoryKeepsOldEventsUntilRoomIsNeeded(t *testing.T) {
	const window = 10 * time.Second
	h := newHistory(window, 100_000)
	h.reset(100)
	for rv := uint64(101); rv <= 150; rv++ {
		h.add(historyEvent(rv, historyEpoch), historyEpoch)
	}
	// An hour later, a write: nothing is evicted, the bound not reached.
	later := historyEpoch.Add(time.Hour)
	if h.add(historyEvent(151, later), later) {
		t.Fatalf("forced eviction below the bound")
	}
	if diff := cmp.Diff(cachertest.Seq(101, 151), historyRVs(t, h)); diff != "" {
		t.Errorf("retained RVs an hour on (-want +got):\n%s", diff)
	}
	if _, ok := h.since(100); !ok {
		t.Errorf("since(100) = false: a resume from the list RV an hour on is refused")
	}
	// The bound's floor: minHistory events are kept however old; the next
	// evicts only the oldest.
	for rv := uint64(152); rv <= 100+MinHistory; rv++ {
		h.add(historyEvent(rv, later), later)
	}
	h.add(historyEvent(101+MinHistory, later), later)
	if h.len() != MinHistory || h.startRV != 101 {
		t.Errorf("at the floor: %d events from startRV %d, want %d from 101", h.len(), h.startRV, MinHistory)
	}
}

// The bound follows upstream's rule: it doubles when full of events inside
// the window (up to capacity), halves when full and its newest quarter is
// outside the window (down to minHistory).
func TestHistoryBoundAdapts(t *testing.T) {
	const window = 10 * time.Second
	h := newHistory(window, 1000)
	h.reset(0)
	if h.limit != MinHistory {
		t.Fatalf("initial bound %d, want %d", h.limit, MinHistory)
	}
	// A burst inside the window grows the bound past it: nothing evicted.
	rv := uint64(0)
	for range 700 {
		rv++
		if h.add(historyEvent(rv, historyEpoch), historyEpoch) {
			t.Fatalf("forced eviction at %d inside capacity", rv)
		}
	}
	if h.limit != 800 || h.len() != 700 || h.startRV != 0 {
		t.Fatalf("after a burst of 700: bound %d, %d events, startRV %d; want 800, 700, 0", h.limit, h.len(), h.startRV)
	}
	// Up to capacity, then events younger than the window are forced out.
	for range 400 {
		rv++
		h.add(historyEvent(rv, historyEpoch), historyEpoch)
	}
	if h.limit != 1000 || h.len() != 1000 || h.startRV != 100 {
		t.Fatalf("past capacity: bound %d, %d events, startRV %d; want 1000, 1000, 100", h.limit, h.len(), h.startRV)
	}
	// The burst over, a full history whose newest quarter is old halves
	// on each add, down to minHistory, keeping the newest events.
	later := historyEpoch.Add(time.Minute)
	for _, want := range []int{500, 250, 125, 100, 100} {
		rv++
		h.add(historyEvent(rv, later), later)
		if h.limit != want {
			t.Fatalf("adding %d a minute on: bound %d, want %d", rv, h.limit, want)
		}
		// Refill to the bound, so the next add sees it full.
		for h.len() < h.limit {
			rv++
			h.add(historyEvent(rv, later.Add(-time.Hour)), later)
		}
	}
	if len(h.ring) > 2*MinHistory {
		t.Errorf("ring has %d slots for a bound of %d", len(h.ring), h.limit)
	}
	if got := historyRVs(t, h); got[len(got)-1] != rv || len(got) != h.limit {
		t.Errorf("retained %d events ending at %d, want %d ending at %d", len(got), got[len(got)-1], h.limit, rv)
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
			if diff := cmp.Diff(cachertest.Seq(102, 104), historyRVs(t, h)); diff != "" {
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
		cutRV       uint64
		wantRVs     []uint64
		wantStartRV uint64
	}{
		{name: "below the start changes nothing", cutRV: 99, wantRVs: []uint64{101, 102, 105, 110}, wantStartRV: 100},
		{name: "at the start changes nothing", cutRV: 100, wantRVs: []uint64{101, 102, 105, 110}, wantStartRV: 100},
		{name: "at an event drops it and everything older", cutRV: 102, wantRVs: []uint64{105, 110}, wantStartRV: 102},
		{name: "between events", cutRV: 107, wantRVs: []uint64{110}, wantStartRV: 105},
		{name: "at the newest", cutRV: 110, wantRVs: nil, wantStartRV: 110},
		{name: "past the newest moves the start only to the last evicted event", cutRV: 200, wantRVs: nil, wantStartRV: 110},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHistory(time.Hour, 100)
			h.reset(100)
			for _, rv := range []uint64{101, 102, 105, 110} {
				h.add(historyEvent(rv, historyEpoch), historyEpoch)
			}
			h.forget(tc.cutRV)
			if diff := cmp.Diff(tc.wantRVs, historyRVs(t, h)); diff != "" {
				t.Errorf("retained RVs (-want +got):\n%s", diff)
			}
			if h.startRV != tc.wantStartRV {
				t.Errorf("startRV = %d, want %d", h.startRV, tc.wantStartRV)
			}
			// Nothing at or below the cut may be served any more.
			for _, e := range mustSince(t, h, h.startRV) {
				if e.RV <= tc.cutRV {
					t.Errorf("event %d at or below the cut %d is still served", e.RV, tc.cutRV)
				}
			}
			if _, ok := h.since(99); ok {
				t.Errorf("since(99) = true: forget moved the start backwards")
			}
		})
	}
}

func mustSince(t *testing.T, h *history, rv uint64) []*objects.Event {
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
	if diff := cmp.Diff(cachertest.Seq(503, 506), historyRVs(t, h)); diff != "" {
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
				if diff := cmp.Diff(cachertest.Seq(rv-kept+1, rv), historyRVs(t, h)); diff != "" {
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
			if oldest.RV != total-uint64(capacity)+1 || newest.RV != total {
				t.Errorf("span() = %d..%d, want %d..%d", oldest.RV, newest.RV, total-uint64(capacity)+1, total)
			}
		})
	}
}

// Growing a ring whose head is not at index 0 (events evicted, then more
// added until it wraps) keeps the order.
func TestHistoryGrowWrappedRing(t *testing.T) {
	const window = 10 * time.Second
	h := newHistory(window, 1000)
	h.reset(0)
	// A full ring whose ten oldest events are outside the window: the next
	// ten adds each evict one of them, moving the head to 10. (Were all of
	// them old, the head would come round to 0 again before the bound could
	// grow, and the grow below would not see a wrapped ring.)
	old, now := historyEpoch.Add(-time.Hour), historyEpoch
	for rv := uint64(1); rv <= MinHistory; rv++ {
		at := now
		if rv <= 10 {
			at = old
		}
		h.add(historyEvent(rv, at), now)
	}
	for rv := uint64(MinHistory + 1); rv <= MinHistory+10; rv++ {
		h.add(historyEvent(rv, now), now)
	}
	if h.head != 10 || h.limit != MinHistory || len(h.ring) != MinHistory {
		t.Fatalf("head %d, bound %d, %d slots: want a full ring of %d with its head at 10", h.head, h.limit, len(h.ring), MinHistory)
	}
	if diff := cmp.Diff(cachertest.Seq(11, MinHistory+10), historyRVs(t, h)); diff != "" {
		t.Fatalf("after evictions (-want +got):\n%s", diff)
	}
	// Everything held is inside the window: the next add grows the bound
	// and the ring, from a head at 10, and later adds grow it again.
	for rv := uint64(MinHistory + 11); rv <= 400; rv++ {
		h.add(historyEvent(rv, now), now)
		if diff := cmp.Diff(cachertest.Seq(11, rv), historyRVs(t, h)); diff != "" {
			t.Fatalf("after adding %d (bound %d, %d slots) (-want +got):\n%s", rv, h.limit, len(h.ring), diff)
		}
	}
	if h.limit != 400 {
		t.Errorf("bound %d after 390 events inside the window, want 400", h.limit)
	}
}

// A burst that is over gives its memory back on the next writes, and the
// events left keep their order through the shrink, later wrap-arounds and
// a cut in the middle of a wrapped ring.
func TestHistoryShrinkKeepsOrder(t *testing.T) {
	const window = 10 * time.Second
	h := newHistory(window, 100_000)
	h.reset(0)
	for rv := uint64(1); rv <= 4096; rv++ {
		h.add(historyEvent(rv, historyEpoch), historyEpoch)
	}
	grown := len(h.ring)
	if grown < 4096 {
		t.Fatalf("ring has %d slots for 4096 events", grown)
	}
	later := historyEpoch.Add(time.Minute)
	rv := uint64(4096)
	for h.limit > MinHistory {
		rv++
		h.add(historyEvent(rv, later.Add(-time.Hour)), later)
	}
	if len(h.ring) >= grown {
		t.Errorf("ring still has %d slots for %d events after the burst", len(h.ring), h.len())
	}
	if diff := cmp.Diff(cachertest.Seq(rv-uint64(h.len())+1, rv), historyRVs(t, h)); diff != "" {
		t.Fatalf("after the shrink (-want +got):\n%s", diff)
	}
	for end := rv + 1900; rv < end; {
		rv++
		h.add(historyEvent(rv, later), later)
	}
	if diff := cmp.Diff(cachertest.Seq(rv-uint64(h.len())+1, rv), historyRVs(t, h)); diff != "" {
		t.Fatalf("after refilling past the shrunk ring (-want +got):\n%s", diff)
	} // Evict from the middle of a wrapped ring by a cut.
	cut := rv - 500
	h.forget(cut)
	got := historyRVs(t, h)
	if !slices.Equal(got, cachertest.Seq(cut+1, rv)) {
		t.Errorf("after forget(%d) retained %d..%d (%d events), want %d..%d", cut, got[0], got[len(got)-1], len(got), cut+1, rv)
	}
	if h.startRV != cut {
		t.Errorf("startRV %d after forget(%d), want %d", h.startRV, cut, cut)
	}
}

// A cut that evicted nothing leaves the start where it was: a resume
// from after the last evicted event stays servable (issue 11).
func TestHistoryCutEvictingNothingKeepsStart(t *testing.T) {
	h := newHistory(time.Minute, 1000)
	h.reset(100)
	h.forget(150) // nothing of this resource in (100, 150]
	if h.startRV != 100 || !h.fromList {
		t.Errorf("startRV %d fromList %v after a cut that evicted nothing, want 100 true", h.startRV, h.fromList)
	}
	if _, ok := h.since(120); !ok {
		t.Errorf("since(120) = false: a cut that evicted nothing made a resume expire")
	}
	h.add(historyEvent(160, historyEpoch), historyEpoch)
	h.forget(170)
	if h.startRV != 160 || h.len() != 0 {
		t.Errorf("startRV %d with %d events after cutting past the only event, want 160 and 0", h.startRV, h.len())
	}
	if _, ok := h.since(165); !ok {
		t.Errorf("since(165) = false after a cut at 170 that evicted only 160")
	}
}

func TestHistoryPrepend(t *testing.T) {
	at := func(d time.Duration) time.Time { return historyEpoch.Add(d) }
	for _, tc := range []struct {
		name      string
		capacity  int
		held      []uint64 // after a reset at 100
		prepend   []uint64
		from      uint64
		wantRVs   []uint64
		wantStart uint64
	}{
		{"fills the gap before the list", 10, []uint64{101, 102}, []uint64{95, 97}, 90, []uint64{95, 97, 101, 102}, 90},
		{"an empty gap still moves the start", 10, []uint64{101}, nil, 90, []uint64{101}, 90},
		{"capacity keeps the newest", 4, []uint64{101, 102}, []uint64{91, 93, 95, 97}, 90, []uint64{95, 97, 101, 102}, 93},
		{"no room at all: unchanged", 2, []uint64{101, 102}, []uint64{95, 97}, 90, []uint64{101, 102}, 100},
		{"into an empty history", 10, nil, []uint64{95}, 90, []uint64{95}, 90},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHistory(time.Minute, tc.capacity)
			h.reset(100)
			for i, rv := range tc.held {
				h.add(historyEvent(rv, at(time.Duration(i+1)*time.Second)), at(0))
			}
			var events []*objects.Event
			for _, rv := range tc.prepend {
				events = append(events, historyEvent(rv, at(time.Hour)))
			}
			h.prepend(events, tc.from, at(10*time.Second))
			if got := historyRVs(t, h); !slices.Equal(got, tc.wantRVs) || h.startRV != tc.wantStart {
				t.Fatalf("after prepend: %v from %d, want %v from %d", got, h.startRV, tc.wantRVs, tc.wantStart)
			}
			// Prepended events age out no later than what followed them.
			if h.len() > 0 && len(tc.held) > 0 && h.oldest().RecordedNanos > at(time.Second).UnixNano() {
				t.Errorf("the oldest event is stamped %v, after the first held one", time.Unix(0, h.oldest().RecordedNanos))
			}
			// Growing after a prepend keeps order.
			h.add(historyEvent(200, at(20*time.Second)), at(20*time.Second))
			if got := historyRVs(t, h); got[len(got)-1] != 200 || !slices.IsSorted(got) {
				t.Fatalf("after an add: %v", got)
			}
		})
	}
}
