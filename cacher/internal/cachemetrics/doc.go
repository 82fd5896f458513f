// Package cachemetrics is the cache's instruments: upstream's watch cache
// metrics it feeds under upstream's names (so dashboards built for
// upstream's cache read the same series), watchkeeper's own
// (watchkeeper_watch_cache_*), one Resource of series per cached resource,
// and the dispatch-stage histogram kept as counters of its own
// (dispatch_stages.go). A leaf: it imports nothing of the cache but its
// shared values.
package cachemetrics
