package feed

import (
	goerrors "errors"
	"sync"
	"time"
)

// The backfiller coalesces the history backfills of one cache (backfill.go
// says how a resume uses them): at most one runs, and what it does not
// reach is taken by the next. Its lock is its own; the Cacher passes it
// what to start.

// backfiller coalesces backfills; see backfill.
type backfiller struct {
	mu      sync.Mutex
	running *backfillRun
	// oldest is the oldest RV asked for, beyond the running backfill's
	// reach, since it started; 0 when none.
	oldest uint64
	// waiting counts the resumes waiting for a backfill.
	waiting int
	// failedAt is when the last backfill failed; zero after one filled.
	failedAt time.Time
}

// state is whether a backfill runs and how many resumes wait for one.
func (b *backfiller) state() (running bool, waiting int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.running != nil, b.waiting
}

// errBackfillerStopped: no backfill runs and the cache is stopping.
var errBackfillerStopped = goerrors.New("stopping")

// join is a resume from rv's share of the backfills: the run that reaches
// back to it (started now, from the oldest RV asked for, when none runs;
// one running that does not reach rv takes it next time round). The
// caller waits for run.done, then leaves.
func (b *backfiller) join(rv uint64, now time.Time, stopping bool, start func(from uint64, afterList bool) *backfillRun) (*backfillRun, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	run := b.running
	switch {
	case run == nil && stopping:
		return nil, errBackfillerStopped
	case run == nil && !b.failedAt.IsZero() && now.Sub(b.failedAt) < BackfillCooldown:
		return nil, errBackfillCoolingDown
	case run == nil:
		from := rv
		if b.oldest != 0 {
			from = min(from, b.oldest)
		}
		b.oldest = 0
		run = start(from, false)
		b.running = run
	case rv < run.from && (b.oldest == 0 || rv < b.oldest):
		b.oldest = rv
	}
	b.waiting++
	return run, nil
}

// leave ends a join's wait.
func (b *backfiller) leave() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.waiting--
}

// startAfterList starts the list's own backfill from from, unless one
// runs already (it was for the history before this list, which it will
// find gone) or the cache is stopping.
func (b *backfiller) startAfterList(from uint64, stopping bool, start func(from uint64) *backfillRun) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.running != nil || stopping {
		return
	}
	b.running = start(from)
}

// finished records the end of run, at now. A list's own backfill leaves
// no cooldown when it fails: no client asked for it, and a resume's
// backfill may yet succeed (from a younger RV).
func (b *backfiller) finished(run *backfillRun, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.running = nil
	switch {
	case run.err == nil:
		b.failedAt = time.Time{}
	case !run.afterList:
		b.failedAt = now
	}
}

// backfillRun is one backfill from an RV; err is set before done closes.
type backfillRun struct {
	from uint64
	// afterList: started by the list, not by a client's resume.
	afterList bool
	done      chan struct{}
	err       error
}
