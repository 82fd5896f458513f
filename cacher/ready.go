package cacher

import (
	"math"
	"time"

	"k8s.io/apimachinery/pkg/api/errors"
)

// notReadyError is the 429 a read or watch that needs the cache gets while
// it is not ready. Retry-After grows with the downtime, from 1s to 30s, so
// a long outage does not turn into a retry storm (upstream's rule).
func notReadyError(now, since time.Time) error {
	retry := math.Exp(0.06 * now.Sub(since).Seconds())
	retry = math.Min(30, math.Max(1, retry))
	return errors.NewTooManyRequests("storage is (re)initializing", int(retry))
}
