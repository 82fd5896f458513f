// Package cacher is watchkeeper's watch cache: a [storage.Interface] that wraps
// one resource's storage (normally etcd3), keeps the resource's current
// objects and past events in memory, and serves watches and cache-friendly
// reads from them. Servers get their caches from
// [github.com/watchkeeper/watchkeeper/decorator.New], one per resource;
// [github.com/watchkeeper/watchkeeper/decorator.Schedule] is the one place a
// [Config] is built from
// [github.com/watchkeeper/watchkeeper/options.WatchCacheOptions], since a
// Config's zero values are never defaults, and
// [github.com/watchkeeper/watchkeeper/debugview] shows the caches. The
// bookmark schedule is [bookmarks.Calendar] and [bookmarks.Policy]; the
// WatchList rules are [watchlist.Tracker].
//
// Data flows one way. The reflector (reflector.go) lists and watches the
// wrapped storage, re-opening its watch on transient errors
// (storage_watch_retry.go), and applies each event to the cache's state,
// then hands it to the dispatcher. The dispatcher (dispatch.go), one
// goroutine, fans events out to the watchers whose key and selectors match
// and, on the bookmark tick, sends a bookmark to the watchers whose slot in
// the bookmarks.Calendar is due. A watcher (watcher.go) has no goroutine while its client keeps up:
// the dispatcher hands each event to the client's channel, and a pump
// goroutine runs only while events queue behind a busy client. Writes go
// straight through to the wrapped storage; the cache learns of them from its
// own watch.
//
// The state is a type of its own, cacheState (state.go: its invariants and
// its lock), as upstream keeps its watchCache apart from its Cacher: the
// current objects (store.go, and ordered.go's index by key), the history
// (history.go), the snapshots (snapshots.go), the RV and readiness. Its
// changes are in state.go (apply, relist, progress, trims), its reads in
// state_read.go (get, lists, a watch's starting state, the history's and
// the snapshots' ranges). The Cacher keeps the feed, the watchers, the
// calendar and the dispatcher, and calls the state's methods. One lock,
// the state's, guards the state and the watchers together: a watcher is
// registered atomically with the state it starts from.
//
// Files follow a request: a watch is parsed, started and registered in
// watch_request.go, delivered by dispatch.go, event_objects.go,
// cacheable.go and watcher.go; freshness.go is how reads and watches wait
// for the RV they need (and the progress requests that move it); read.go
// serves Get and GetList; backfill.go fills the history from etcd for a
// resume from before the cache's list; storage_liveness.go tells a silent
// etcd from an idle one.
package cacher
