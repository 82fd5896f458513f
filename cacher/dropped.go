package cacher

import (
	"sync"
	"time"
)

// droppedLogInterval bounds the log lines of a failure that repeats for every
// watcher or every tick: the metric counts each drop, the log says how many
// since its last line.
const droppedLogInterval = 10 * time.Second

// dropLog rate-limits the dropped-event log; the dispatcher, the tick and
// watch requests all report to it.
type dropLog struct {
	mu     sync.Mutex
	last   time.Time
	unseen int
}

// dropped records something a client will not be sent because the cache
// could not build it: never silently, always counted, logged with the
// resource (the cache's logger), what and at which resourceVersion.
func (c *Cacher) dropped(what string, rv uint64, err error, keysAndValues ...any) {
	c.metrics.Dropped[what].Inc()
	unseen, log := c.dropLog.admit(c.clock.Now())
	if !log {
		return
	}
	kv := append([]any{"what", what, "resourceVersion", rv, "droppedSinceLastLog", unseen}, keysAndValues...)
	c.logger.Error(err, "Watch cache could not build what a client is owed; dropped it", kv...)
}

// admit says whether a drop at now gets a log line (one per
// droppedLogInterval) and how many went unlogged since the last one.
func (l *dropLog) admit(now time.Time) (unseen int, log bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && now.Sub(l.last) < droppedLogInterval {
		l.unseen++
		return 0, false
	}
	unseen = l.unseen
	l.last, l.unseen = now, 0
	return unseen, true
}
