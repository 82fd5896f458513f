package feed

import (
	"errors"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
)

// StorageWatchRetryWindow is how long the cache stays ready while it
// re-opens a failing storage watch from its RV. It is client-go's
// MaxInternalErrorRetryDuration as upstream's cacher sets it (30s): an etcd
// leader election ends every watch opened WithRequireLeader with "no
// leader", and is over within seconds. Past it the cache goes not ready
// (reads get 429) and goes on re-opening the watch from its RV until it
// answers; it does not relist, as upstream's reflector does at that point:
// a relist ends every client watch of the resource, and a partition from
// etcd that outlasts the window (a blackhole of a minute or more) heals
// into a watch that resumes from the cache's RV as well as any other. Only
// etcd saying the RV is compacted (410) makes the cache relist.
const StorageWatchRetryWindow = 30 * time.Second

// maxStorageWatchRetryBackoff caps the spacing of re-opened watches: an
// election is over in a few seconds, so the cache should look again soon.
const maxStorageWatchRetryBackoff = 2 * time.Second

// errTransient marks a storage watch failure the cache survives by
// re-opening the watch from its RV, keeping its state and its watchers.
var errTransient = errors.New("transient storage watch failure")

// transientError wraps a storage watch failure that a re-watch can mend.
type transientError struct{ err error }

func (e transientError) Error() string { return e.err.Error() }
func (e transientError) Unwrap() []error {
	return []error{e.err, errTransient}
}

// classifyWatchError sorts an error the storage watch reported: a
// compaction past the cache's RV (410) needs a relist, as does anything the
// cache's own code failed at (an inconsistency the checker found among
// them); etcd's troubles (no leader, unavailable, timeouts, a broken
// stream: InternalError and friends) are transient, and so is a watch the
// silence check ended: etcd's client resumes a watch from where it was once
// etcd is back, as upstream's cache relies on, and the cache's history
// stays good for its clients' resumes, where a relist would restart it and
// turn every resume from before it into a backfill from etcd, or a 410.
func classifyWatchError(err error) error {
	if err == nil || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		return err
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) || errors.Is(err, errWatchClosed) || errors.Is(err, errStorageSilent) {
		return transientError{err}
	}
	return err
}

func isTransient(err error) bool { return errors.Is(err, errTransient) }

// watchRetry is the budget of one run of storage watch failures: a backoff
// that grows from initialBackoff, and a window that starts at the first
// failure and restarts whenever a watch delivers something. Pure: the
// caller passes the time.
type watchRetry struct {
	window  time.Duration
	first   time.Time // zero while no failure is pending
	backoff time.Duration
}

// progressed says a watch delivered something: the failures before it are
// forgiven.
func (r *watchRetry) progressed() {
	r.first = time.Time{}
	r.backoff = 0
}

// next returns how long to wait before re-opening the watch after a failure
// at now, and whether the failures are still within the window. The first
// re-open is immediate: a stream that etcd merely reset resumes at once, as
// a restarted member's clients expect.
func (r *watchRetry) next(now time.Time) (delay time.Duration, within bool) {
	if r.first.IsZero() {
		r.first = now
	}
	within = now.Sub(r.first) < r.window
	if r.backoff > 0 {
		delay = wait.Jitter(r.backoff, 0.5)
	}
	r.backoff = min(max(2*r.backoff, initialBackoff), maxStorageWatchRetryBackoff)
	return delay, within
}
