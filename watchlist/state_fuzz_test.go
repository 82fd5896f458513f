package watchlist

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"
)

// Tracker fuzz operations: one opcode byte, then for the Accepts eight
// argument bytes (missing bytes read as 0).
const (
	trackerOpAcceptNear      = iota // Accept(floor + int8 delta): around the floor, saturating
	trackerOpAcceptAny              // Accept(any uint64)
	trackerOpSent                   // Sent on a bookmark without annotations
	trackerOpSentAnnotated          // Sent on a bookmark that already has an annotation
	trackerOpSentWithoutMeta        // Sent on an object without metadata: always an error
	trackerOpAcceptThenSent         // Accept(floor + int8 delta), and Sent when accepted
	trackerOpDelivered              // Delivered: a bookmark annotated when it was built reached the client
	trackerOpCount

	trackerMaxOps = 1000
)

// trackerOps encodes operations for the seed corpus.
func trackerOps(ops ...any) []byte {
	var in []byte
	for _, op := range ops {
		switch op := op.(type) {
		case int8: // Accept(floor + op)
			in = append(in, trackerOpAcceptNear, byte(op))
		case uint64: // Accept(op)
			in = binary.BigEndian.AppendUint64(append(in, trackerOpAcceptAny), op)
		case byte: // any other opcode, and its argument if it takes one
			in = append(in, op)
		default:
			panic(fmt.Sprintf("trackerOps: %T", op))
		}
	}
	return in
}

// trackerCall is one call of a fuzz run, formatted only on failure.
type trackerCall struct {
	sent      bool // Sent
	delivered bool // Delivered; else Accept
	rv        uint64
	obj       runtime.Object
	ok        bool
	err       error
	from, to  State
}

func (c trackerCall) String() string {
	if c.sent {
		return fmt.Sprintf("Sent(%T) = %v, %v: %v -> %v", c.obj, c.ok, c.err, c.from, c.to)
	}
	if c.delivered {
		return fmt.Sprintf("Delivered() = %v: %v -> %v", c.ok, c.from, c.to)
	}
	return fmt.Sprintf("Accept(%d) = %v: %v -> %v", c.rv, c.ok, c.from, c.to)
}

// legalMove reports whether a Tracker may go from one state to the other
// in one call: stay, or move one step along
// WaitingForBookmark -> BookmarkReceived -> BookmarkSent.
func legalMove(from, to State) bool {
	return from == to ||
		(from == WaitingForBookmark && to == BookmarkReceived) ||
		(from == BookmarkReceived && to == BookmarkSent)
}

// FuzzTracker drives one watcher's Tracker from a random floor through a
// random sequence of Accept(rv), Sent(obj) and Delivered(), and checks that
// the state only moves forward one step at a time, a bookmark below the
// floor is refused and changes nothing, the initial-events-end marker lands
// on exactly one sent object and only after a bookmark at or above the floor
// was accepted, and a floor of 0 is a plain watch that starts in
// BookmarkSent.
//
// Delivered is the other way the end of the initial events reaches the
// client (the cacher annotates the bookmark when it builds it and reports
// its delivery later): it reports true, moving BookmarkReceived to
// BookmarkSent, exactly when the watcher is in BookmarkReceived, and false,
// changing nothing, otherwise. Between them, Sent's marker and Delivered
// end the initial events once in a watch's life, never for a plain watch,
// and never before a bookmark at or above the floor was accepted.
func FuzzTracker(f *testing.F) {
	f.Add(uint64(0), trackerOps(uint64(0), byte(trackerOpSent), uint64(5), byte(trackerOpSent)))
	f.Add(uint64(100), trackerOps(int8(-1), int8(-100), byte(trackerOpSent), int8(0), byte(trackerOpSent), int8(1), byte(trackerOpSent)))
	f.Add(uint64(100), trackerOps(int8(50), int8(0), byte(trackerOpSentAnnotated), byte(trackerOpSentAnnotated)))
	f.Add(uint64(1), trackerOps(int8(0), byte(trackerOpSentWithoutMeta), byte(trackerOpSent), byte(trackerOpSentWithoutMeta), int8(-1)))
	f.Add(uint64(math.MaxUint64), trackerOps(uint64(math.MaxUint64-1), int8(1), int8(0), byte(trackerOpSent), uint64(0)))
	f.Add(uint64(math.MaxUint64), trackerOps(byte(trackerOpSent), uint64(math.MaxUint64), int8(127), byte(trackerOpSent)))
	f.Add(uint64(7), trackerOps(byte(trackerOpAcceptThenSent), byte(0), byte(trackerOpAcceptThenSent), byte(0x80), byte(trackerOpAcceptThenSent), byte(3)))
	f.Add(uint64(42), []byte{})
	f.Add(uint64(5), trackerOps(byte(trackerOpDelivered), int8(-1), byte(trackerOpDelivered), int8(0), byte(trackerOpDelivered), byte(trackerOpDelivered), byte(trackerOpSent)))
	f.Add(uint64(0), trackerOps(byte(trackerOpDelivered), uint64(3), byte(trackerOpDelivered)))
	f.Add(uint64(9), trackerOps(int8(0), byte(trackerOpSent), byte(trackerOpDelivered), int8(1), byte(trackerOpDelivered)))

	f.Fuzz(func(t *testing.T, floor uint64, in []byte) {
		next := func(n int) []byte {
			out := make([]byte, n)
			copy(out, in)
			in = in[min(n, len(in)):]
			return out
		}
		var trace []trackerCall
		fail := func(format string, args ...any) {
			t.Helper()
			var b strings.Builder
			for _, c := range trace {
				fmt.Fprintf(&b, "\n  %v", c)
			}
			t.Fatalf("NewTracker(%d), then:%s\n%s", floor, b.String(), fmt.Sprintf(format, args...))
		}

		tr := NewTracker(floor)
		if floor == 0 {
			if tr.State() != BookmarkSent {
				fail("floor 0 starts in %v, want BookmarkSent", tr.State())
			}
		} else if tr.State() != WaitingForBookmark {
			fail("floor %d starts in %v, want WaitingForBookmark", floor, tr.State())
		}

		var (
			acceptedAtFloor bool // a bookmark at or above a non-zero floor was accepted
			markers         int  // sent objects that carry the marker
			ends            int  // ends of the initial events: markers, and Delivered reporting true
		)
		accept := func(rv uint64) bool {
			t.Helper()
			before := tr.State()
			ok := tr.Accept(rv)
			trace = append(trace, trackerCall{rv: rv, ok: ok, from: before, to: tr.State()})
			if !legalMove(before, tr.State()) {
				fail("illegal transition %v -> %v", before, tr.State())
			}
			if ok != (rv >= floor) {
				fail("Accept(%d) with floor %d = %v", rv, floor, ok)
			}
			switch {
			case rv < floor && tr.State() != before:
				fail("a bookmark below the floor moved the state from %v to %v", before, tr.State())
			case rv >= floor && before == WaitingForBookmark && tr.State() != BookmarkReceived:
				fail("a bookmark at or above the floor moved a waiting watcher to %v, want BookmarkReceived", tr.State())
			case rv >= floor && before != WaitingForBookmark && tr.State() != before:
				fail("Accept moved the state from %v to %v", before, tr.State())
			}
			if ok && floor > 0 {
				acceptedAtFloor = true
			}
			return ok
		}
		// sent sends a bookmark: a plain one, one with an annotation of its
		// own, or an object without metadata.
		sent := func(op byte) {
			t.Helper()
			var obj runtime.Object
			switch op {
			case trackerOpSentAnnotated:
				obj = &example.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"keep": "me"}}}
			case trackerOpSentWithoutMeta:
				obj = &runtime.Unknown{}
			default:
				obj = &example.Pod{}
			}
			before := tr.State()
			got, err := tr.Sent(obj)
			trace = append(trace, trackerCall{sent: true, obj: obj, ok: got, err: err, from: before, to: tr.State()})
			if !legalMove(before, tr.State()) {
				fail("illegal transition %v -> %v", before, tr.State())
			}
			isMarked := false
			if pod, ok := obj.(*example.Pod); ok {
				var readErr error
				if isMarked, readErr = storage.HasInitialEventsEndBookmarkAnnotation(pod); readErr != nil {
					fail("reading the marker: %v", readErr)
				}
				if op == trackerOpSentAnnotated && pod.Annotations["keep"] != "me" {
					fail("Sent dropped the object's own annotation: %v", pod.Annotations)
				}
			}
			if got != isMarked {
				fail("Sent reported marker %v, the object has it: %v", got, isMarked)
			}
			if isMarked {
				markers++
				ends++
				if ends > 1 {
					fail("the initial events ended %d times, want once", ends)
				}
				if !acceptedAtFloor {
					fail("the marker was set before any bookmark at or above floor %d was accepted", floor)
				}
				if markers > 1 {
					fail("the marker is on %d sent objects, want exactly one", markers)
				}
			}
			switch {
			case before == WaitingForBookmark:
				if err == nil || got || tr.State() != WaitingForBookmark {
					fail("Sent while waiting for a bookmark at or above the floor = %v, %v, state %v; want an error and no change", got, err, tr.State())
				}
			case before == BookmarkReceived && op == trackerOpSentWithoutMeta:
				if err == nil || tr.State() != BookmarkReceived {
					fail("Sent on an object without metadata = %v, %v, state %v; want an error and no change", got, err, tr.State())
				}
			case before == BookmarkReceived:
				if err != nil || !got || tr.State() != BookmarkSent {
					fail("Sent after a bookmark was accepted = %v, %v, state %v; want the marker and BookmarkSent", got, err, tr.State())
				}
			case before == BookmarkSent:
				if err != nil || got || tr.State() != BookmarkSent {
					fail("Sent after the end of the initial events = %v, %v, state %v; want no marker, no error, no change", got, err, tr.State())
				}
			}
		}
		delivered := func() {
			t.Helper()
			before := tr.State()
			got := tr.Delivered()
			trace = append(trace, trackerCall{delivered: true, ok: got, from: before, to: tr.State()})
			if !legalMove(before, tr.State()) {
				fail("illegal transition %v -> %v", before, tr.State())
			}
			switch {
			case before == BookmarkReceived && (!got || tr.State() != BookmarkSent):
				fail("Delivered after a bookmark was accepted = %v, state %v; want true and BookmarkSent", got, tr.State())
			case before != BookmarkReceived && (got || tr.State() != before):
				fail("Delivered in %v = %v, state %v; want false and no change", before, got, tr.State())
			}
			if got {
				ends++
				if !acceptedAtFloor {
					fail("Delivered ended the initial events before any bookmark at or above floor %d was accepted", floor)
				}
				if ends > 1 {
					fail("the initial events ended %d times, want once", ends)
				}
			}
		}
		near := func() uint64 {
			delta := int8(next(1)[0])
			switch {
			case delta < 0 && uint64(-int64(delta)) > floor:
				return 0
			case delta < 0:
				return floor - uint64(-int64(delta))
			case uint64(delta) > math.MaxUint64-floor:
				return math.MaxUint64
			default:
				return floor + uint64(delta)
			}
		}
		for ops := 0; len(in) > 0 && ops < trackerMaxOps; ops++ {
			switch op := next(1)[0] % trackerOpCount; op {
			case trackerOpAcceptNear:
				accept(near())
			case trackerOpAcceptAny:
				accept(binary.BigEndian.Uint64(next(8)))
			case trackerOpSent, trackerOpSentAnnotated, trackerOpSentWithoutMeta:
				sent(op)
			case trackerOpAcceptThenSent:
				if accept(near()) {
					sent(trackerOpSent)
				}
			case trackerOpDelivered:
				delivered()
			}
			if tr.Floor() != floor {
				fail("Floor() = %d, want %d", tr.Floor(), floor)
			}
			if tr.FloorReached() != (tr.State() != WaitingForBookmark) {
				fail("FloorReached() = %v in state %v", tr.FloorReached(), tr.State())
			}
		}

		// The initial events ended exactly once (by a marker or by
		// Delivered) once a bookmark at or above the floor was accepted and
		// then sent or delivered; never for a plain watch.
		switch {
		case floor == 0 && ends != 0:
			fail("a plain watch (floor 0) ended its initial events %d times", ends)
		case tr.State() == BookmarkSent && floor > 0 && ends != 1:
			fail("in BookmarkSent with floor %d after %d ends of the initial events, want exactly one", floor, ends)
		case tr.State() != BookmarkSent && ends != 0:
			fail("in %v after %d ends of the initial events, want none before BookmarkSent", tr.State(), ends)
		}
	})
}
