// Package cacher is watchkeeper's watch cache: a storage.Interface that wraps
// one resource's storage (normally etcd3), keeps the resource's current
// objects and a window of past events in memory, and serves watches and
// cache-friendly reads from them.
//
// Data flows one way. The reflector lists and watches the wrapped storage and
// applies each event to the store and the history under the cache lock, then
// hands it to the dispatcher. The dispatcher, one goroutine, fans events out
// to the watchers whose selectors match and, on the bookmark tick, sends a
// bookmark to the watchers whose slot in the bookmarks.Calendar is due. Each
// watcher has a goroutine that turns cached events into watch.Events for its
// client. Writes go straight through to the wrapped storage; the cache learns
// of them from its own watch.
package cacher
