package feed

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// probeTimeout bounds one progress request, so a dead etcd cannot hold the
// requester (and everyone waiting on it) forever.
const probeTimeout = 5 * time.Second

// errStorageSilent ends a storage watch that etcd stopped answering. etcd's
// client retries a broken watch stream quietly, so without this an outage
// would leave the cache ready and serving a stale state with bookmarks at an
// old RV.
var errStorageSilent = errors.New("storage watch silent")

// heard records that the storage watch delivered something: an event, a
// progress notification or its start.
func (f *Feed) heard(now time.Time) { f.heardNanos.Store(now.UnixNano()) }

// VerifyingSilence is whether a check of etcd's revision after a silence
// runs.
func (f *Feed) VerifyingSilence() bool { return f.verifying.Load() }

// EndWatchAsSilent ends the storage watch as the liveness check does after
// timeout of silence: the cache goes not ready and re-opens it.
func (f *Feed) EndWatchAsSilent(timeout time.Duration) { f.watchEnd.end(silentError(timeout)) }

// newWatchLost makes what the next storage watch waits on besides its
// events; the dispatcher closes it when the watch has been silent too long.
// The silence of the watch it replaces must not count against it, so the
// clock restarts here, before the watch is opened.
func (f *Feed) newWatchLost() <-chan struct{} {
	f.heard(f.clock.Now())
	return f.watchEnd.arm()
}

// watchEnd is how the liveness and consistency checks end the storage
// watch the reflector follows: a silence re-opens it, an inconsistency
// relists. Its lock is a leaf.
type watchEnd struct {
	mu sync.Mutex
	// lost is closed to end the current watch; nil when none runs or it was
	// ended already. why says why it was.
	lost chan struct{}
	why  error
}

// arm makes what the next storage watch waits on besides its events.
func (e *watchEnd) arm() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.lost = make(chan struct{})
	return e.lost
}

// end ends the current watch for why; false when none was running.
func (e *watchEnd) end(why error) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lost == nil {
		return false
	}
	e.why = why
	close(e.lost)
	e.lost = nil
	return true
}

// reason is why the last watch was ended.
func (e *watchEnd) reason() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.why
}

// Silence is how long the storage watch has said nothing; false before
// the first watch (then the reflector's list is what is failing) or when the
// check is off (limit <= 0).
func (f *Feed) Silence(now time.Time, limit time.Duration) (time.Duration, bool) {
	heard := f.heardNanos.Load()
	if limit <= 0 || heard == 0 {
		return 0, false
	}
	return time.Duration(now.UnixNano() - heard), true
}

// checkStorageLiveness runs every feedCheckPeriod: after a third of the silence
// timeout without a word from the storage watch it asks etcd for progress
// (through the shared requester: one at a time per resource), and after the
// whole timeout it ends the watch, so the cache goes not ready and re-opens
// it from its RV (a relist only on a 410); while not ready it
// reads etcd's revision every period to tell an idle etcd that is back.
func (f *Feed) checkStorageLiveness(now time.Time) {
	timeout := f.cfg.StorageSilenceTimeout
	silent, ok := f.Silence(now, timeout)
	if !ok {
		return
	}
	switch {
	case silent >= timeout && f.verifying.CompareAndSwap(false, true):
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer f.verifying.Store(false)
			f.verifySilence(silent)
		}()
	case f.silenced.Load() && f.verifying.CompareAndSwap(false, true):
		// Not ready since a silence: on an etcd back but idle the
		// re-opened watch says nothing (it starts above etcd's revision),
		// so look at etcd's revision every period rather than after a
		// whole timeout.
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer f.verifying.Store(false)
			_, _, _ = f.probeIdle()
		}()
	case silent >= timeout/3:
		f.progress.request()
	}
}

// verifySilence tells an idle etcd from a dead one. etcd sends no progress
// notification, asked for or periodic, to a watch that starts above its
// current revision, so on an etcd nobody writes to the cache's watch is
// silent although all is well. If etcd answers and has nothing the cache
// lacks, that answer is the word the cache waited for. If etcd is ahead,
// that proves nothing either way: every resource's writes move its revision,
// and a busy etcd may be slow to answer a progress request. So the watch
// gets as long again for a word on its own stream (the requester keeps
// asking) before it is called lost; one that is dead stays silent. If etcd
// does not answer at all, the watch is lost at once.
func (f *Feed) verifySilence(silent time.Duration) {
	heardBefore := f.heardNanos.Load()
	rv, idle, err := f.probeIdle()
	if idle {
		return
	}
	if err == nil && f.awaitWord(heardBefore, f.cfg.StorageSilenceTimeout) {
		f.logger.V(2).Info("Storage watch answered after a silence", "silentFor", silent, "etcdRV", rv)
		return
	}
	if f.watchEnd.end(silentError(f.cfg.StorageSilenceTimeout)) {
		f.logger.Info("Storage watch silent; ending it", "silentFor", silent,
			"etcdRV", rv, "cacheRV", f.state.CurrentRV(), "err", err)
	}
}

// awaitWord asks etcd for progress on the cache's stream until the storage
// watch says anything after heardBefore, for at most limit.
func (f *Feed) awaitWord(heardBefore int64, limit time.Duration) bool {
	release := f.progress.wait()
	defer release()
	deadline := f.clock.NewTimer(limit)
	defer deadline.Stop()
	// A timer, not a ticker: a fake clock's ticker cannot be stopped.
	poll := f.clock.NewTimer(ProgressRequestPeriod)
	defer poll.Stop()
	for f.heardNanos.Load() == heardBefore {
		select {
		case <-poll.C():
			poll.Reset(ProgressRequestPeriod)
		case <-deadline.C():
			return f.heardNanos.Load() != heardBefore
		case <-f.ctx.Done():
			return false
		}
	}
	return true
}

// probeIdle reads etcd's revision; when etcd has nothing the cache lacks,
// the watch is silent only because etcd is idle: that is word from etcd,
// and it ends a silence's not-ready spell. It returns what it read.
func (f *Feed) probeIdle() (rv uint64, idle bool, err error) {
	ctx, cancel := context.WithTimeout(f.ctx, probeTimeout)
	defer cancel()
	if rv, err = f.storage.GetCurrentResourceVersion(ctx); err != nil {
		return rv, false, err
	}
	idle = rv <= f.state.CurrentRV()
	if idle {
		f.heard(f.clock.Now())
		f.answered()
	}
	return rv, idle, nil
}

func silentError(timeout time.Duration) error {
	return fmt.Errorf("%w: nothing from etcd for %v, progress requests unanswered", errStorageSilent, timeout)
}
