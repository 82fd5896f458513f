package feed

import "time"

// feedCheckPeriod is how often the feed's own checks run: the storage
// liveness check (storage_liveness.go), the consistency check's schedule
// (consistency.go) and forgetting what etcd compacted. They run on a timer
// of their own rather than on the bookmark tick, so the bookmark settings
// (--watch-cache-bookmark-granularity) do not change how soon a silent
// storage watch is noticed, and a slow check never delays a bookmark.
const feedCheckPeriod = time.Second

// feedChecks is the goroutine that runs them, until the cache stops.
func (f *Feed) feedChecks() {
	defer f.wg.Done()
	// A timer, not a ticker: a fake clock's ticker cannot be stopped.
	t := f.clock.NewTimer(feedCheckPeriod)
	defer t.Stop()
	for {
		select {
		case <-f.stopCh:
			return
		case <-t.C():
			now := f.clock.Now()
			if !f.overBudget.Load() {
				// Over its budget the cache watches nothing and holds
				// nothing to compare.
				f.checkStorageLiveness(now)
				f.maybeCheckConsistency(now)
			}
			f.forgetCompacted()
			t.Reset(feedCheckPeriod)
		}
	}
}

// forgetCompacted drops the snapshots etcd compacted away, and sets
// upstream's apiserver_watch_cache_resource_version: upstream sets it on
// every event, a label lookup each (about 1 us of a write); once a period
// is as current as any scrape can tell.
func (f *Feed) forgetCompacted() {
	f.metrics.SetResourceVersion(f.state.ForgetCompacted(f.storage.CompactRevision()))
}
