package watchlist

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage"
)

// State is where a watcher stands with its initial-events-end bookmark.
type State int

const (
	// WaitingForBookmark: the initial events are out (or going out) and no
	// bookmark at or above the floor has been taken yet. The watcher asks for
	// a bookmark every slot and gets no heartbeat.
	WaitingForBookmark State = iota
	// BookmarkReceived: a bookmark at or above the floor has been queued for the
	// watcher but has not reached the client yet. The client is alive but slow;
	// such a watcher is drained and closed gracefully, not cut off, so its
	// client can resume from that bookmark.
	BookmarkReceived
	// BookmarkSent: the client has the bookmark that ends its initial events,
	// or never asked for one (a plain watch). Bookmarks from here on are plain
	// heartbeats.
	BookmarkSent
)

func (s State) String() string {
	switch s {
	case WaitingForBookmark:
		return "WaitingForBookmark"
	case BookmarkReceived:
		return "BookmarkReceived"
	case BookmarkSent:
		return "BookmarkSent"
	default:
		return fmt.Sprintf("State(%d)", int(s))
	}
}

// legal lists the only transitions; everything else is a bug in the caller.
var legal = map[State]State{
	WaitingForBookmark: BookmarkReceived,
	BookmarkReceived:   BookmarkSent,
}

// Tracker is one watcher's WatchList state; build it with NewTracker.
type Tracker struct {
	floor uint64
	state State
}

// NewTracker starts a watcher whose initial-events-end bookmark must carry at
// least floor. A floor of 0 is a plain watch: there is no bookmark to wait
// for, so it starts in BookmarkSent and goes straight onto the heartbeat.
func NewTracker(floor uint64) Tracker {
	if floor == 0 {
		return Tracker{state: BookmarkSent}
	}
	return Tracker{floor: floor, state: WaitingForBookmark}
}

// Floor is the lowest RV a bookmark for this watcher may carry.
func (t *Tracker) Floor() uint64 { return t.floor }

// State is the watcher's current state.
func (t *Tracker) State() State { return t.state }

// FloorReached reports whether the watcher has taken a bookmark at or above
// its floor; until then the bookmark policy keeps it due at once.
func (t *Tracker) FloorReached() bool { return t.state != WaitingForBookmark }

// Accept decides whether a bookmark at rv may be queued for the watcher. A
// bookmark below the floor is refused and changes nothing: the client cannot
// use it, and queueing it would only crowd its buffer. The first bookmark at
// or above the floor moves a waiting watcher to BookmarkReceived.
func (t *Tracker) Accept(rv uint64) bool {
	if rv < t.floor {
		return false
	}
	if t.state == WaitingForBookmark {
		t.state = legal[WaitingForBookmark]
	}
	return true
}

// Sent records that a bookmark accepted by Accept reached the client. The
// first one after the floor was reached is the end of the initial events:
// Sent annotates obj (the bookmark's object, whose annotations must be a
// map the caller owns) with the initial-events-end marker, moves the watcher
// to BookmarkSent and reports true. Later bookmarks are left alone.
func (t *Tracker) Sent(obj runtime.Object) (bool, error) {
	switch t.state {
	case BookmarkSent:
		return false, nil
	case BookmarkReceived:
		if err := storage.AnnotateInitialEventsEndBookmark(obj); err != nil {
			return false, fmt.Errorf("marking the end of the initial events: %w", err)
		}
		return t.Delivered(), nil
	default:
		return false, fmt.Errorf("bookmark sent in state %v: no bookmark at or above floor %d was accepted", t.state, t.floor)
	}
}

// Delivered records that the initial-events-end bookmark, annotated when it
// was built, reached the client: for callers that hand the object over
// before it is delivered and so may no longer touch it. It reports whether
// the watcher moved to BookmarkSent.
func (t *Tracker) Delivered() bool {
	if t.state != BookmarkReceived {
		return false
	}
	t.state = legal[BookmarkReceived]
	return true
}
