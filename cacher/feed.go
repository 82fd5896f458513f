package cacher

import (
	"sync/atomic"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachemetrics"
)

// storageFeed is what the cache's storage feed keeps: the reflector (its
// list, its watch and the retries, reflector.go and
// storage_watch_retry.go), the liveness and consistency checks on their
// own timer (feed_checks.go), the progress requester (progress_requester.go) and
// the backfills (backfill.go). Each field is safe on its own (atomics, or
// a type with its own lock) or owned by one goroutine, as its comment says.
type storageFeed struct {
	// watchMetadata tags the cache's own watch and its progress requests
	// with the same gRPC metadata, so etcd answers a progress request on the
	// stream the cache actually reads. It names the resource: etcd answers a
	// progress request only when every watch on the stream is synced, and
	// caches sharing an etcd client must not share a stream, or one
	// resource's lagging watch would starve a quiet one of the progress its
	// liveness and freshness depend on. (generic.NewRawStorage gives each
	// resource a client of its own; a server wiring one client to several
	// resources gets one stream per resource all the same.)
	watchMetadata metadata.MD
	// backfillMetadata keeps the backfill's etcd watch, which starts behind
	// and so is not synced, off the stream the cache follows.
	backfillMetadata metadata.MD
	// heardNanos is when the storage watch last delivered anything; see
	// storage_liveness.go.
	heardNanos atomic.Int64
	progress   *progressRequester
	// verifying is whether a check of etcd's revision after a silence runs.
	verifying atomic.Bool
	// silenced is set while the cache is not ready because its storage
	// watch was called silent and re-opened, until that watch answers.
	silenced atomic.Bool
	// checkingConsistency is whether a consistency check runs.
	checkingConsistency atomic.Bool
	// backfills runs one history backfill at a time (backfill.go).
	backfills backfiller
	// forcedEvictionLog limits the capacity warning; only the reflector uses it.
	forcedEvictionLog cachemetrics.EveryInterval
	// watchEnd ends the storage watch when the liveness or the consistency
	// check says so (storage_liveness.go).
	watchEnd watchEnd
	// nextConsistencyCheck is when the cache next compares itself with
	// etcd (consistency.go); only the feedChecks goroutine uses it.
	nextConsistencyCheck time.Time
}
