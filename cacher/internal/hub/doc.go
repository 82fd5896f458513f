// Package hub is the fan-out: the open watchers of one cache (Watcher, one
// per client watch, with no goroutine while its client keeps up), filed by
// key, trigger value and shard range for the Dispatcher (watcher_set.go,
// shard_index.go), and the bookmark calendar, under Hub's lock; the
// Dispatcher that hands each event, once built (EventObjects), to the
// watchers whose selectors match (match_class.go), never waiting for a
// client; and the delivery latency it observes. A Watcher is registered
// by the Cacher while it holds the state's read lock, so it starts exactly
// after the state it was given; the hub never reads the state itself.
package hub
