package main

import (
	"errors"
	"strconv"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
)

// spec is what a watcher watches: a namespace ("" for all) and selectors.
// Watchers with equal specs share one, so the checker filters the history
// once per spec.
type spec struct {
	ns                 string
	labelSel           labels.Selector
	fieldSel           fields.Selector
	labelStr, fieldStr string
}

func newSpec(ns, label, field string) (*spec, error) {
	l, err := labels.Parse(label)
	if err != nil {
		return nil, err
	}
	f, err := fields.ParseSelector(field)
	if err != nil {
		return nil, err
	}
	return &spec{ns: ns, labelSel: l, fieldSel: f, labelStr: label, fieldStr: field}, nil
}

// matches is whether one version of a widget is in the watch: the server's
// own rule (cacher/event.go matches) on the server's own attributes.
func (s *spec) matches(a *attrs) bool {
	if a == nil || (s.ns != "" && a.ns != s.ns) {
		return false
	}
	return s.labelSel.Matches(a.labels) && s.fieldSel.Matches(a.fields)
}

func (s *spec) String() string {
	ns := s.ns
	if ns == "" {
		ns = "*"
	}
	return ns + " {" + s.labelStr + "} {" + s.fieldStr + "}"
}

// Event types as recorded; a stream records its bookmarks among its
// events, in the order they came, for the bookmark check.
const (
	evAdded uint8 = iota + 1
	evModified
	evDeleted
	evBookmark
)

type recEvent struct {
	rv  uint64
	key int32
	typ uint8
}

type item struct {
	key int32
	rv  uint64
}

// segment is one piece of a watcher's life: a state (a LIST, or a
// WatchList's initial events up to their end bookmark) that resets the
// watcher's view to the objects at rv, or a stream of events after rv.
type segment struct {
	state  bool
	rv     uint64 // the state's RV, or the RV the stream resumed from
	items  []item
	events []recEvent // a stream's events and bookmarks, as they came
	// watchList marks a state made of a WatchList's initial events; preEnd
	// holds what such a stream sent before its end bookmark that was not
	// an ADDED (the contract allows none), and incomplete a WatchList that
	// ended before its end bookmark (its state is not checked, its preEnd
	// is).
	watchList, incomplete bool
	preEnd                []recEvent
	// ack is the highest RV the stream acknowledged: by an event, or by a
	// bookmark (which promises every event at or below it was sent).
	ack uint64
	// ended is set once the stream is over; openAtEnd when it was still
	// open when the soak stopped the watchers, so it owes every event up to
	// the final revision.
	ended, openAtEnd bool
}

func (s *segment) event(typ uint8, key int32, rv uint64) {
	s.events = append(s.events, recEvent{rv: rv, key: key, typ: typ})
	s.ack = max(s.ack, rv)
}

func (s *segment) bookmark(rv uint64) {
	s.events = append(s.events, recEvent{rv: rv, typ: evBookmark})
	s.ack = max(s.ack, rv)
}

// watcherRec is one logical watcher's record: every state and stream it
// had, in order.
type watcherRec struct {
	kind string // "watch" or "informer"
	spec *spec

	mu   sync.Mutex
	segs []*segment
	// live is the stream being read, nil between streams.
	live *segment
	// ack mirrors live.ack for the final wait, which reads it while the
	// stream's reader writes.
	ack atomic.Uint64
}

func (r *watcherRec) addState(rv uint64, items []item) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.segs = append(r.segs, &segment{state: true, rv: rv, items: items})
}

// addWatchListState records a WatchList's initial events: complete (ended
// by the end bookmark at rv) or not, with whatever else came before the
// end.
func (r *watcherRec) addWatchListState(rv uint64, items []item, preEnd []recEvent, complete bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.segs = append(r.segs, &segment{state: true, rv: rv, items: items, watchList: true, preEnd: preEnd, incomplete: !complete})
}

func (r *watcherRec) beginStream(from uint64) *segment {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := &segment{rv: from, ack: from}
	r.segs = append(r.segs, s)
	r.live = s
	r.ack.Store(from)
	return s
}

func (r *watcherRec) acked(s *segment) {
	r.mu.Lock()
	if r.live == s {
		r.ack.Store(s.ack)
	}
	r.mu.Unlock()
}

func (r *watcherRec) endStream(s *segment, stopping bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s.ended, s.openAtEnd = true, stopping
	if r.live == s {
		r.live = nil
	}
}

// caughtUp is whether the watcher is reading a stream that has
// acknowledged rv.
func (r *watcherRec) caughtUp(rv uint64) bool {
	r.mu.Lock()
	live := r.live != nil
	r.mu.Unlock()
	return live && r.ack.Load() >= rv
}

// stats are the soak's running counters.
type stats struct {
	delivered atomic.Int64 // object events received on streams
	bookmarks atomic.Int64
	gone      atomic.Int64 // 410 Gone/Expired answers, in the stream or not
	// resumeGone are those of them answering a watch that resumed after a
	// stream ended (from its last event or bookmark), not a first watch.
	resumeGone atomic.Int64
	// endedEarly counts streams that ended well before their timeout
	// without a 410: the server ended them, or the connection broke.
	endedEarly atomic.Int64
	// resumedElsewhere counts resumes on another replica than the stream
	// before.
	resumedElsewhere atomic.Int64
	relists          atomic.Int64 // states after a watcher's first
	// rewinds are resumes from an earlier delivered RV than the last.
	rewinds   atomic.Int64
	streams   atomic.Int64
	writes    atomic.Int64 // writes the writers got an answer for
	writeErrs atomic.Int64

	mu       sync.Mutex
	errors   map[string]int    // other errors, by status code or kind
	messages map[string]string // one message for each
}

func newStats() *stats { return &stats{errors: map[string]int{}, messages: map[string]string{}} }

// noteError counts an error by its HTTP status (or "transport").
func (s *stats) noteError(where string, err error) {
	code := "transport"
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		code = strconv.Itoa(int(st.Status().Code))
		// client-go's own report of a stream it closed (a reflector
		// stopping a watch) is no answer of the server's.
		if d := st.Status().Details; d != nil {
			for _, c := range d.Causes {
				if c.Type == "ClientWatchDecoding" {
					code = "client"
				}
			}
		}
	}
	s.mu.Lock()
	s.errors[where+":"+code]++
	if _, ok := s.messages[where+":"+code]; !ok {
		s.messages[where+":"+code] = err.Error()
	}
	s.mu.Unlock()
}

func (s *stats) noteGone(resuming bool) {
	s.gone.Add(1)
	if resuming {
		s.resumeGone.Add(1)
	}
}

func isGone(err error) bool {
	var st apierrors.APIStatus
	return errors.As(err, &st) && st.Status().Code == 410
}

func parseRV(s string) uint64 {
	v, _ := strconv.ParseUint(s, 10, 64)
	return v
}
