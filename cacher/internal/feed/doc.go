// Package feed is the storage feed of one resource's cache: the only
// writer of its state (internal/state). The reflector (reflector.go) lists
// the wrapped storage and follows its watch, re-opening it from the cache's
// RV on transient errors (storage_watch_retry.go), applies each event to
// the state and hands it to the dispatcher's input; storage liveness
// (storage_liveness.go) tells a silent etcd from an idle one and the
// consistency check (consistency.go) compares the cache with etcd, both on
// the feed's own timer (feed_checks.go); the progress requester
// (progress_requester.go) asks etcd for progress while reads and watches
// wait for an RV (freshness.go); backfills (backfill.go, backfill_state.go,
// backfiller.go) fill the history from etcd for resumes from before the
// cache's list. The Cacher builds it with New, given what it needs (Env),
// starts it, and asks it for freshness, etcd's revision and backfills; the
// feed never sees the watchers, only EndWatchers, which closes them in the
// state's exclusive hold of a relist.
package feed
