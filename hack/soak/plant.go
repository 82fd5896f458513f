package main

import (
	"fmt"
	"strings"
	"sync/atomic"
)

// plants are bugs the soak puts in on purpose (-plant), to see its
// checkers catch them: each fires once, in the record of the first client
// it reaches, as if the server had done it.
//
//   - drop-event: a plain watcher's record leaves out one event it got (a
//     cache that dropped it); the watcher goes on as if it had seen it.
//   - repeat-event: a plain watcher's record holds one event twice.
//   - stale-read: one linearizability client's consistent read (RV "") is
//     made at RV "0" instead, served from the cache's possibly stale state,
//     and recorded as consistent; the client retries until the answer is
//     stale, for a few seconds.
type plants struct {
	dropEvent, repeatEvent, staleRead atomic.Bool
}

var planted plants

func (p *plants) set(list string) error {
	for _, name := range strings.Split(list, ",") {
		switch strings.TrimSpace(name) {
		case "":
		case "drop-event":
			p.dropEvent.Store(true)
		case "repeat-event":
			p.repeatEvent.Store(true)
		case "stale-read":
			p.staleRead.Store(true)
		default:
			return fmt.Errorf("unknown -plant %q: drop-event, repeat-event or stale-read", name)
		}
	}
	return nil
}

// take reports whether the plant b was armed, and disarms it.
func take(b *atomic.Bool) bool { return b.Load() && b.CompareAndSwap(true, false) }
