// Package watchlist holds the rules of the WatchList protocol
// (sendInitialEvents=true with allowWatchBookmarks=true) that a watch cache
// must follow: the initial objects, then exactly one bookmark annotated
// k8s.io/initial-events-end at a resourceVersion at or above the watcher's
// floor, then live events.
//
// Floor picks the floor from the request; Tracker is the per-watcher
// three-state machine WaitingForBookmark -> BookmarkReceived -> BookmarkSent
// that decides which bookmarks a watcher may take and which one carries the
// marker. Both are pure: the cacher owns the locking.
package watchlist
