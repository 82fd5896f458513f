package hub

import (
	"fmt"

	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
)

// selection is what a watcher's key and selectors make of one event: whether
// they select the object after the change, before it, both or neither.
type selection uint8

const (
	SelectsCur selection = 1 << iota
	selectsPrev
)

// matchClass is the watchers of one cache that select alike: the same key,
// recursion and selectors, so what one of them selects of an event, all do.
// The dispatcher works a selection out once per class and event rather than
// once per watcher: with 100k kubelet-shaped watchers, ten on each Secret,
// matching each watcher's own (cold) key and selector was the largest part
// of the dispatch.
type matchClass struct {
	sig string
	// refs counts the class's watchers; guarded by the hub's mu, as the
	// watcherSet that interns the class is.
	refs int

	// The dispatcher goroutine's memo: sel is the class's selection of the
	// event numbered seq (dispatchSeq, from 1, so the zero memo is never
	// taken for an answer).
	seq uint64
	sel selection
}

// MatchSignature is what two watchers of a cache share when they select
// alike. A selector of apimachinery's prints its canonical form (Parse reads
// it back to an equal selector), so the same type and string select the same
// objects; the type tells apart the two that print as "" (Everything and
// Nothing). Selectors that select alike but print differently only make two
// classes.
func MatchSignature(w *Watcher) string {
	shard := ""
	if w.Shard != nil {
		shard = w.Shard.Text
	}
	return fmt.Sprintf("%s\x00%t\x00%T\x00%s\x00%T\x00%s\x00%s",
		w.Key, w.Recursive, w.Pred.Label, selectorString(w.Pred.Label), w.Pred.Field, selectorString(w.Pred.Field), shard)
}

func selectorString(s fmt.Stringer) string {
	if s == nil {
		return ""
	}
	return s.String()
}

// selectionFor is what w selects of e, the dispatcher's event number seq:
// from the memo of w's class when another watcher of the class already
// worked it out for this event.
func selectionFor(w *Watcher, e *objects.Event, seq uint64) selection {
	c := w.class
	if c == nil {
		return w.Selects(e)
	}
	if c.seq != seq {
		c.seq, c.sel = seq, w.Selects(e)
	}
	return c.sel
}
