// Package bookmarks schedules watch bookmarks without a timer per watcher.
//
// It has three pieces, all pure logic driven by an injected clock and owning no
// goroutine:
//
//   - [Calendar] files watchers into slots of a fixed granularity counted from
//     the calendar's creation, and pops every expired slot in bulk, so a pop
//     costs O(watchers due) and a pop with nothing due costs O(1).
//   - [Policy] answers "when is this watcher's next bookmark due": immediately
//     while its WatchList floor has not been reached, otherwise the earlier of
//     one frequency from now and a fixed offset before the watch deadline.
//   - [Tick] is the one jittered timer per calendar that drives the pops; its
//     owner (the cacher) waits on it and re-arms it after every fire.
//
// The defaults match the hardcoded behaviour of the upstream watch cache: a one
// second granularity, a one minute frequency, a bookmark two seconds before the
// deadline and a tick drawn from [1s, 1.25s).
//
// The package takes its schedule as given and imports no other watchkeeper
// package, so each rule is tested alone with a fake clock. The values and
// their validation are [github.com/watchkeeper/watchkeeper/options.WatchCacheOptions];
// the one user is [github.com/watchkeeper/watchkeeper/cacher], whose
// dispatcher goroutine waits on each resource's tick and pops its calendar;
// whether a watcher's floor has been reached is
// [github.com/watchkeeper/watchkeeper/watchlist.Tracker.FloorReached].
package bookmarks
