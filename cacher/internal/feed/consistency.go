package feed

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage/cacher/consistency"
	upstream "k8s.io/apiserver/pkg/storage/cacher/metrics"
	utilfeature "k8s.io/apiserver/pkg/util/feature"

	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
)

// consistencyCheckPeriod is how often the cache compares itself with etcd
// (upstream's DetectCacheInconsistency: every 5 minutes, jittered by up to
// half); consistencyCheckTimeout bounds one check.
const (
	ConsistencyCheckPeriod  = 5 * time.Minute
	consistencyCheckTimeout = time.Minute
	// shownDifferences bounds the keys a failed check logs; it counts all.
	shownDifferences = 20
)

// ErrInconsistent ends the storage watch when the consistency check
// found the cache differing from etcd: the reflector relists.
var ErrInconsistent = errors.New("watch cache inconsistent with etcd")

// PanicOnInconsistency is upstream's switch, read once from the environment
// by its package: KUBE_WATCHCACHE_CONSISTENCY_CHECKER=true.
var PanicOnInconsistency = func() bool { return consistency.PanicOnCacheInconsistency }

// maybeCheckConsistency runs every feedCheckPeriod: when a check is due (and the
// DetectCacheInconsistency gate is on) it starts one, owned by the cache's
// WaitGroup.
// consistencyCheckRunning is whether a consistency check runs.
func (f *Feed) ConsistencyCheckRunning() bool { return f.checkingConsistency.Load() }

func (f *Feed) maybeCheckConsistency(now time.Time) {
	if !utilfeature.DefaultFeatureGate.Enabled(features.DetectCacheInconsistency) {
		return
	}
	if f.nextConsistencyCheck.IsZero() {
		f.nextConsistencyCheck = now.Add(wait.Jitter(ConsistencyCheckPeriod, 0.5))
		return
	}
	if now.Before(f.nextConsistencyCheck) || !f.checkingConsistency.CompareAndSwap(false, true) {
		return
	}
	f.nextConsistencyCheck = now.Add(wait.Jitter(ConsistencyCheckPeriod, 0.5))
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer f.checkingConsistency.Store(false)
		ctx, cancel := context.WithTimeout(f.ctx, consistencyCheckTimeout)
		defer cancel()
		_ = f.CheckConsistency(ctx)
	}()
}

// CheckConsistency compares the cache's objects at its RV (key and
// resourceVersion each) with etcd's list at that same RV. On a mismatch it
// counts a failure (upstream's
// apiserver_watch_cache_storage_consistency_checks_total{status}), logs the
// keys that differ (upstream says only that something does), and ends the
// storage watch so the cache relists, dropping its snapshots with the state
// they were taken of.
func (f *Feed) CheckConsistency(ctx context.Context) error {
	count := func(status string) {
		upstream.StorageConsistencyCheckTotal.WithLabelValues(f.cfg.GroupResource.Group, f.cfg.GroupResource.Resource, status).Inc()
	}
	cached, rv, ready, err := f.state.ObjectRVs(f.cfg.Versioner)
	if !ready {
		return fmt.Errorf("watch cache of %v not ready", f.cfg.GroupResource)
	}
	var etcd map[string]*objects.Object
	if err == nil {
		etcd, err = f.stateAt(ctx, rv)
	}
	if err != nil {
		count("error")
		f.logger.Error(err, "Cache consistency check could not compare", "resourceVersion", rv)
		return err
	}
	var differ []string
	for key, o := range etcd {
		etcdRV, err := o.RV(f.cfg.Versioner)
		switch cacheRV, ok := cached[key]; {
		case !ok:
			differ = append(differ, fmt.Sprintf("%s (not in the cache, etcd rv %d)", key, etcdRV))
		case err != nil || cacheRV != etcdRV:
			differ = append(differ, fmt.Sprintf("%s (cache rv %d, etcd rv %d)", key, cacheRV, etcdRV))
		}
		delete(cached, key)
	}
	for key, cacheRV := range cached {
		differ = append(differ, fmt.Sprintf("%s (cache rv %d, not in etcd)", key, cacheRV))
	}
	if len(differ) == 0 {
		count("success")
		f.logger.V(3).Info("Cache consistency check passed", "resourceVersion", rv, "objects", len(etcd))
		return nil
	}
	count("failure")
	slices.Sort(differ)
	shown := differ[:min(len(differ), shownDifferences)]
	if PanicOnInconsistency() {
		// Upstream's CI runs its servers with
		// KUBE_WATCHCACHE_CONSISTENCY_CHECKER=true so that a divergence fails
		// the job instead of healing unseen; the same setting does the same
		// here.
		panic(fmt.Sprintf("watch cache of %v inconsistent with etcd at resourceVersion %d: %d keys differ: %v",
			f.cfg.GroupResource, rv, len(differ), shown))
	}
	f.logger.Error(ErrInconsistent, "Cache consistency check failed: relisting", "resourceVersion", rv,
		"differing", len(differ), "keys", shown)
	f.watchEnd.end(fmt.Errorf("%w at %d: %d keys differ", ErrInconsistent, rv, len(differ)))
	return ErrInconsistent
}
