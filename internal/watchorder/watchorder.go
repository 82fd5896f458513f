// Package watchorder checks a watch stream against the events it owes: each
// once and in order, and bookmarks never behind the last event nor ahead of
// one still to come. The stall-and-resume tests of cacher/ and integration/
// read their streams through it.
package watchorder

import (
	"fmt"

	"k8s.io/apimachinery/pkg/watch"
)

// Reader follows one stream. Pure: the caller reads the events and hands
// each one's type and RV to Take.
type Reader struct {
	want []uint64
	// after is the RV the stream starts after: no bookmark may go below it.
	after        uint64
	next         int
	lastBookmark uint64
	// Bookmarks counts the bookmarks taken.
	Bookmarks int
}

// New is a reader of a stream that starts after after and owes the events
// at want, sorted RVs.
func New(after uint64, want []uint64) *Reader { return &Reader{want: want, after: after} }

// Done is whether every owed event came.
func (r *Reader) Done() bool { return r.next == len(r.want) }

// Taken is how many of the owed events came.
func (r *Reader) Taken() int { return r.next }

// Take checks the next event of the stream, of type typ at rv: an error
// says which rule it breaks.
func (r *Reader) Take(typ watch.EventType, rv uint64) error {
	last := r.after
	if r.next > 0 {
		last = r.want[r.next-1]
	}
	switch {
	case typ == watch.Bookmark:
		if rv < last {
			return fmt.Errorf("a bookmark @%d went back behind the event @%d", rv, last)
		}
		r.lastBookmark = rv
		r.Bookmarks++
	case typ == watch.Error:
		return fmt.Errorf("an error after %d of %d events", r.next, len(r.want))
	case r.Done():
		return fmt.Errorf("an event @%d after all %d owed", rv, len(r.want))
	case rv != r.want[r.next]:
		return fmt.Errorf("after %d of %d events got @%d, want @%d: every event once, in order", r.next, len(r.want), rv, r.want[r.next])
	case rv <= r.lastBookmark:
		return fmt.Errorf("event @%d after a bookmark @%d: the bookmark overtook it", rv, r.lastBookmark)
	default:
		r.next++
	}
	return nil
}
