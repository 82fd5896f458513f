package cacher

import (
	"math"
	"time"

	"k8s.io/apimachinery/pkg/api/errors"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachemetrics"
)

// goNotReady takes the cache out of service for why: pending until a list
// or its storage watch mends it, or stopped for good; alsoLocked runs in
// the same hold of the state's lock (state.State.GoNotReady). A transition
// from ready is counted (not_ready_total), so an operator sees why reads
// went to etcd or got 429.
func (c *Cacher) goNotReady(why string, alsoLocked func()) {
	if c.state.GoNotReady(why == cachemetrics.NotReadyStopped, c.clock.Now(), alsoLocked) {
		c.metrics.WentNotReady(why)
	}
}

// notReadyError is the 429 a read or watch that needs the cache gets while
// it is not ready. Retry-After grows with the downtime, from 1s to 30s, so
// a long outage does not turn into a retry storm (upstream's rule).
func notReadyError(now, since time.Time) error {
	retry := math.Exp(0.06 * now.Sub(since).Seconds())
	retry = math.Min(30, math.Max(1, retry))
	return errors.NewTooManyRequests("storage is (re)initializing", int(retry))
}
