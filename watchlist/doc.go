// Package watchlist holds the rules of the WatchList protocol
// (sendInitialEvents=true with allowWatchBookmarks=true) that a watch cache
// must follow: the initial objects, then exactly one bookmark annotated
// k8s.io/initial-events-end at a resourceVersion at or above the watcher's
// floor, then live events.
//
// [Floor] picks the floor from the request; [Tracker] is the per-watcher
// three-state machine [WaitingForBookmark] -> [BookmarkReceived] ->
// [BookmarkSent] that decides which bookmarks a watcher may take and which
// one carries the marker (set by [storage.AnnotateInitialEventsEndBookmark]).
// Both are pure: the cacher owns the locking.
//
// The rules live apart from the cache so that each can be tested, and
// fuzzed, without one: a client that gets the marker below its floor
// believes an incomplete snapshot is complete. A
// [github.com/watchkeeper/watchkeeper/cacher.Cacher] keeps one Tracker per
// watcher, [github.com/watchkeeper/watchkeeper/bookmarks.Policy] keeps a
// watcher due at once until its floor is reached, and
// [github.com/watchkeeper/watchkeeper/debugview] counts watchers by
// [State].
package watchlist
