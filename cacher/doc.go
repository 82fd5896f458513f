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
package cacher

// For maintainers (not the package documentation: go doc shows the
// facade, New, Config, Cacher and Inspection, and docs/architecture.md
// has the whole picture).
//
// Data flows one way. The feed (internal/feed: the reflector, its watch
// retries, storage liveness, the consistency check, progress requests,
// backfills) lists and watches the wrapped storage, applies each event to
// the cache's state, then hands it to the dispatcher. The dispatcher (internal/hub/dispatch.go, run by internal/hub/loop.go), one
// goroutine, fans events out to the watchers whose key and selectors match
// and, on the bookmark tick, sends a bookmark to the watchers whose slot in
// the bookmarks.Calendar is due. A watcher (internal/hub/watcher.go) has no goroutine while its client keeps up:
// the dispatcher hands each event to the client's channel, and a pump
// goroutine runs only while events queue behind a busy client; one that
// falls behind stalls, out of the fan-out, and is fed again from the
// history when its client reads again (internal/hub/stall.go, stall.go). Writes go
// straight through to the wrapped storage; the cache learns of them from its
// own watch.
//
// The owners are packages under internal/: feed (Feed, the state's only
// writer), state (State: its invariants and its lock), hub (Hub, Watcher,
// Dispatcher), and the leaves objects,
// cachemetrics, versions and, for tests, cachertest. The state is kept
// apart from the Cacher as upstream keeps its watchCache: the
// current objects (store.go, and ordered.go's index by key), the history
// (history.go), the snapshots (snapshots.go), the RV and readiness. Its
// changes are in state.go (apply, relist, progress, trims), its reads in
// state_read.go (get, lists, a watch's starting state, the history's and
// the snapshots' ranges). The hub (hub.go) holds the open watchers, filed
// for the dispatcher (watcher_set.go), and the bookmark calendar, under a
// lock of its own: a watcher is registered with it while Watch holds the
// state's read lock, so it starts exactly after the state it was given.
// File names in this paragraph are internal/state's and internal/hub's.
// The Cacher builds and starts the feed and the hub's loop (the dispatcher
// goroutine, which also runs the bookmark tick and the shutdown bookmarks;
// fan_out.go gives it what it needs of the cache), and serves
// storage.Interface from them.
//
// # Lock order
//
// Every lock lives in the type it guards. Taken together, only in this
// order: the state's mu (state.State), then the hub's mu, then a watcher's
// mu. A stalled watcher's resume takes the state's read lock, then its own
// mu, lets go, then the hub's mu (stall.go). The feed's progress requester's mu is taken with the state's mu held or
// alone, never with a watcher's. Leaves, held with nothing taken inside:
// the state's cloneMu and its store's lock, relays.mu (taken inside the
// state's exclusive hold that hands the watchers to etcd, budget_relay.go,
// and alone), the feed's backfiller mu
// (never with the state's mu), a backfill's pastStateReader.mu, dropLog.mu,
// the feed's watchEnd.mu and progressAnswers.mu, a shared object's mu, the dispatch stages' mu and
// internal/versions' planMu.
// Only a type's own methods take its lock. Methods named ...Locked want
// their type's lock held by the caller, the Cacher's (startLocked,
// unchangedSinceLocked, resumeLocked, ...) the state's, which the state's
// Read and GoNotReady run them in.
//
// Files follow a request: a watch is parsed, started and registered in
// watch_request.go, delivered by internal/hub (loop.go, dispatch.go,
// event_objects.go, watcher.go) with internal/objects' cacheable.go;
// internal/feed's freshness.go is how reads and watches wait for the RV
// they need (and the progress requests that move it); routing.go sends
// each Get and GetList to the cache or to etcd, and read.go and
// snapshot_list.go serve what the cache answers; internal/feed's
// backfill.go fills the history from etcd for a resume from before the
// cache's list, its storage_liveness.go tells a silent etcd from an idle
// one.
