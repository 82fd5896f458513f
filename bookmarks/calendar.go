package bookmarks

import (
	"fmt"
	"slices"
	"time"

	"k8s.io/utils/clock"
)

// Calendar files watchers of type W into slots of a fixed granularity and hands
// back, in bulk, every slot whose time has come.
//
// Slot n covers [created + n*granularity, created + (n+1)*granularity). A
// watcher filed for time X sits in X's slot and is popped by the first PopDue
// at or after the start of that slot, so when PopDue runs at least once per
// granularity the watcher comes out within (X - granularity, X + granularity).
// Giving up sub-slot precision is what makes one timer serve every watcher.
//
// A Calendar is not safe for concurrent use; its owner serialises access.
type Calendar[W any] struct {
	clock       clock.PassiveClock
	granularity time.Duration
	created     time.Time

	// watermark is the first slot not yet popped. Every slot below it has been
	// handed out and deleted, which is why PopDue never scans the map: it only
	// walks from the watermark to the current slot.
	watermark int64
	slots     map[int64][]W
	filed     int
}

// NewCalendar returns an empty calendar whose slot zero starts now. The
// granularity must be > 0 (options validate it; a zero is a programming
// error, not a default).
func NewCalendar[W any](clk clock.PassiveClock, granularity time.Duration) *Calendar[W] {
	if granularity <= 0 {
		panic(fmt.Sprintf("bookmarks: calendar granularity %v, must be > 0", granularity))
	}
	return &Calendar[W]{
		clock:       clk,
		granularity: granularity,
		created:     clk.Now(),
		slots:       make(map[int64][]W),
	}
}

// Granularity is the width of one slot.
func (c *Calendar[W]) Granularity() time.Duration { return c.granularity }

// Len is the number of watchers filed and not yet popped.
func (c *Calendar[W]) Len() int { return c.filed }

// Add files w under the slot of at. A time whose slot has already been popped
// (the zero time, "now" after this slot's pop, anything in the past) is clamped
// to the first slot not yet popped: a watcher is never lost and never fires
// twice from one Add.
func (c *Calendar[W]) Add(w W, at time.Time) {
	slot := c.watermark
	if !at.IsZero() {
		if s := c.slotOf(at); s > slot {
			slot = s
		}
	}
	c.slots[slot] = append(c.slots[slot], w)
	c.filed++
}

// PopDue removes every slot up to and including the current one and appends
// their watchers to dst, one inner slice per non-empty slot, oldest first. The
// returned slices belong to the caller. Passing the previous result re-sliced
// to zero length avoids an allocation per tick.
func (c *Calendar[W]) PopDue(dst [][]W) [][]W {
	current := c.slotOf(c.clock.Now())
	if current < c.watermark {
		return dst
	}
	if c.filed == 0 {
		// Nothing to hand out: jump instead of walking empty slots, so a calendar
		// left unpolled for a long time still pops in O(1).
		c.watermark = current + 1
		return dst
	}
	if current-c.watermark >= int64(len(c.slots)) {
		// More slots to walk than slots filed: visit the filed ones instead. This
		// bounds a late pop by the map's size rather than by the elapsed time.
		return c.popByScan(dst, current)
	}
	for ; c.watermark <= current; c.watermark++ {
		dst = c.take(dst, c.watermark)
	}
	return dst
}

func (c *Calendar[W]) popByScan(dst [][]W, current int64) [][]W {
	due := make([]int64, 0, len(c.slots))
	for slot := range c.slots {
		if slot <= current {
			due = append(due, slot)
		}
	}
	slices.Sort(due)
	for _, slot := range due {
		dst = c.take(dst, slot)
	}
	c.watermark = current + 1
	return dst
}

func (c *Calendar[W]) take(dst [][]W, slot int64) [][]W {
	ws, ok := c.slots[slot]
	if !ok {
		return dst
	}
	delete(c.slots, slot)
	c.filed -= len(ws)
	return append(dst, ws)
}

// HasDueBy reports whether a PopDue at t would hand out any watcher. It looks
// at the slots from the watermark to t's (or the filed ones, when fewer), so
// a tick can ask it about the next tick in O(1).
func (c *Calendar[W]) HasDueBy(t time.Time) bool {
	if c.filed == 0 {
		return false
	}
	last := c.slotOf(t)
	if last-c.watermark >= int64(len(c.slots)) {
		for slot := range c.slots {
			if slot <= last {
				return true
			}
		}
		return false
	}
	for slot := c.watermark; slot <= last; slot++ {
		if _, ok := c.slots[slot]; ok {
			return true
		}
	}
	return false
}

// SlotCount is how many watchers one slot holds.
type SlotCount struct {
	Start    time.Time
	Watchers int
}

// Slots reports the filed slots, oldest first, with their watcher counts. It
// copies counts only and scans the map: it is for debugging and metrics, not
// for the tick path.
func (c *Calendar[W]) Slots() []SlotCount {
	ids := make([]int64, 0, len(c.slots))
	for slot := range c.slots {
		ids = append(ids, slot)
	}
	slices.Sort(ids)
	out := make([]SlotCount, len(ids))
	for i, slot := range ids {
		out[i] = SlotCount{Start: c.slotStart(slot), Watchers: len(c.slots[slot])}
	}
	return out
}

func (c *Calendar[W]) slotOf(t time.Time) int64 {
	d := t.Sub(c.created)
	if d < 0 {
		return -1
	}
	return int64(d / c.granularity)
}

func (c *Calendar[W]) slotStart(slot int64) time.Time {
	return c.created.Add(time.Duration(slot) * c.granularity)
}
