// Package objects holds the values every part of the cache shares, and
// nothing that changes under a lock of another part: an Object (a cached
// version with its key, labels and fields), an Event (a change between two
// Objects at an RV, or a progress notification), the encode-once
// SharedObject a watcher's client is handed through a CacheableObject, the
// compiled ShardFilter and the Trigger an index-backed selector pins. The
// state stores them, the feed builds them, the fan-out hub delivers them.
package objects
