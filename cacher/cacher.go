package cacher

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/metadata"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/watchkeeper/watchkeeper/bookmarks"
	"github.com/watchkeeper/watchkeeper/cacher/internal/cachemetrics"
	"github.com/watchkeeper/watchkeeper/cacher/internal/hub"
	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
	"github.com/watchkeeper/watchkeeper/cacher/internal/state"
	"github.com/watchkeeper/watchkeeper/watchlist"
)

// incomingBuffer bounds the events applied to the cache but not yet handed
// to watchers; when it is full the reflector waits, and etcd buffers for us.
const incomingBuffer = 1000

// Cacher is one resource's watch cache. It implements storage.Interface.
//
// It keeps the storage feed (the reflector, its retries, the liveness and
// consistency checks, backfills) and the dispatcher. What the cache holds
// of the resource is its state (state.State, internal/state); the watchers and the
// bookmark calendar are the hub's (internal/hub). Each guards itself with a lock
// of its own; the lock order is in doc.go.
type Cacher struct {
	// cfg is the completed Config: the resource, its storage and versioner,
	// the schedule's settings.
	cfg     Config
	storage storage.Interface
	trigger *objects.Trigger
	clock   clock.WithTicker
	metrics *cachemetrics.Resource
	// logger carries the resource; every log line of the cache uses it.
	logger klog.Logger

	// stopCh closes when the cache stops; wg owns every goroutine of the
	// cache, which Stop waits for.
	stopCh chan struct{}
	wg     sync.WaitGroup
	life   lifecycle
	// incoming is the applied events the dispatcher has not taken yet.
	incoming chan *objects.Event
	// dropLog limits the log of what could not be built (dropped.go).
	dropLog dropLog

	// state is the objects, history and snapshots (state.State); hub the
	// watchers and the bookmark calendar. Each has its own lock; the order
	// is in doc.go.
	state *state.State
	hub   *hub.Hub
	// feed is what the storage feed keeps between its goroutines (feed.go);
	// fan what the fan-out side does (the dispatcher and the watchers).
	feed storageFeed
	fan  fanOut
}

// lifecycle is the cache's stop: Stop runs once, and ctx ends with it.
type lifecycle struct {
	stopOnce sync.Once
	// ctx ends when the cache stops; background requests use it.
	ctx       context.Context
	cancelCtx context.CancelFunc
}

// fanOut is what the dispatcher side keeps besides the hub.
type fanOut struct {
	// watcherEnv is what every watcher of this cache is given (internal/hub/watcher.go).
	watcherEnv *hub.WatcherEnv
	// lastTickNanos is how long the last bookmark tick took, for Inspect.
	lastTickNanos atomic.Int64
	// bookmarkAll asks the dispatcher for a bookmark to every watcher
	// (shutdown_bookmarks.go); it answers on the request's channel.
	bookmarkAll chan bookmarkAllRequest
}

var _ storage.Interface = (*Cacher)(nil)

// New starts a watch cache over cfg.Storage. It returns at once; the cache
// is not ready (ReadinessCheck fails, reads that need it get 429) until the
// first list is in.
func New(cfg Config) (*Cacher, error) {
	if err := cfg.complete(); err != nil {
		return nil, err
	}
	trig, err := objects.NewTrigger(cfg.IndexerFuncs)
	if err != nil {
		return nil, err
	}
	metrics := cachemetrics.NewResource(cfg.GroupResource, backfillCooldown)
	c := &Cacher{
		trigger:  trig,
		cfg:      cfg,
		storage:  cfg.Storage,
		clock:    cfg.Clock,
		metrics:  metrics,
		logger:   klog.Background().WithValues("resource", cfg.GroupResource.String()),
		stopCh:   make(chan struct{}),
		incoming: make(chan *objects.Event, incomingBuffer),
		fan:      fanOut{bookmarkAll: make(chan bookmarkAllRequest)},
		state: state.New(cfg.ResourcePrefix, cfg.Indexers, cfg.EventsHistoryWindow, cfg.HistoryCapacity,
			utilfeature.DefaultFeatureGate.Enabled(features.ListFromCacheSnapshot), metrics, cfg.Clock.Now()),
		hub: hub.New(bookmarks.Policy{Frequency: cfg.BookmarkFrequency, PreDeadlineOffset: cfg.BookmarkPreDeadlineOffset},
			cfg.BookmarkGranularity, cfg.Clock),
		feed: storageFeed{
			watchMetadata:     metadata.New(map[string]string{"source": "watchkeeper", "resource": cfg.GroupResource.String()}),
			backfillMetadata:  metadata.New(map[string]string{"source": "watchkeeper-backfill", "resource": cfg.GroupResource.String()}),
			forcedEvictionLog: cachemetrics.EveryInterval{Interval: 10 * time.Second},
		},
	}
	c.life.ctx, c.life.cancelCtx = context.WithCancel(metadata.NewOutgoingContext(context.Background(), c.feed.watchMetadata))
	c.feed.progress = newProgressRequester(c.life.ctx, c.stopCh, &c.wg, c.clock, c.requestProgress)
	c.fan.watcherEnv = &hub.WatcherEnv{
		Clock: c.clock, Buffer: cfg.WatcherBuffer, Stop: c.stopCh, WG: &c.wg,
		Forget: c.forgetWatcher, Moved: c.metrics.WatcherMoved, Bookmark: c.bookmarkObject, Dropped: c.dropped,
		Latency: &hub.DispatchLatency{Stages: cachemetrics.DispatchStages.ForResource(c.cfg.GroupResource)},
	}
	if utilfeature.DefaultFeatureGate.Enabled(features.SizeBasedListCostEstimate) {
		// The store estimates object sizes for list cost from the keys it is
		// told exist; the cache knows them without asking etcd.
		if err := c.storage.EnableResourceSizeEstimation(c.keys); err != nil {
			return nil, fmt.Errorf("enabling size estimation for %v: %w", c.cfg.GroupResource, err)
		}
	}
	c.wg.Add(3)
	go c.reflectLoop()
	go c.dispatchLoop()
	go c.feedChecks()
	c.logger.Info("Watch cache started",
		"bookmarkFrequency", cfg.BookmarkFrequency, "preDeadlineOffset", cfg.BookmarkPreDeadlineOffset,
		"historyWindow", cfg.EventsHistoryWindow, "granularity", cfg.BookmarkGranularity, "jitter", cfg.BookmarkJitter)
	return c, nil
}

// Stop ends every watcher and the cache's goroutines and waits for them. It
// does not stop the wrapped storage. Calling it twice is fine.
func (c *Cacher) Stop() {
	c.life.stopOnce.Do(func() {
		close(c.stopCh)
		c.life.cancelCtx()
		c.goNotReady(cachemetrics.NotReadyStopped, c.terminateAll)
		c.wg.Wait()
	})
}

// Ready reports whether the cache has its first list in and is serving.
func (c *Cacher) Ready() bool {
	return c.state.IsReady()
}

// WaitReady blocks until the cache is ready, ctx ends or the cache stops.
func (c *Cacher) WaitReady(ctx context.Context) error {
	for {
		ready, _, changed := c.state.Readiness()
		switch ready {
		case state.Ready:
			return nil
		case state.Stopped:
			return fmt.Errorf("watch cache of %v stopped", c.cfg.GroupResource)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// forgetWatcher removes w. graceful lets it deliver what it has queued and
// then close; otherwise it closes at once. Either way nothing more is queued.
func (c *Cacher) forgetWatcher(w *hub.Watcher, graceful bool) {
	live := c.hub.Remove(w)
	if live {
		c.left(w)
	}
	if graceful && live {
		w.Drain()
		return
	}
	w.Terminate()
}

// terminateSlow closes a watcher that could not keep up. One whose client
// has been handed its initial-events-end bookmark but not read it yet is
// drained and closed gracefully, so the client resumes from that bookmark
// instead of relisting; the others are cut off.
func (c *Cacher) terminateSlow(w *hub.Watcher) {
	graceful := w.ListState() == watchlist.BookmarkReceived
	c.metrics.TerminatedWatchers.Inc()
	c.logger.V(2).Info("Closing a watcher that cannot keep up", "graceful", graceful)
	c.forgetWatcher(w, graceful)
}

// EndWatches ends every client watch, each after its client has read what
// is queued for it, and keeps the cache running: a server shutting down
// calls it so its clients resume from their last event or bookmark on
// another replica at once, instead of when the HTTP server's shutdown
// timeout cuts them off. It returns how many it ended.
func (c *Cacher) EndWatches() int {
	ending := c.hub.RemoveAll()
	for _, w := range ending {
		c.left(w)
		w.Drain()
	}
	if len(ending) > 0 {
		c.logger.V(2).Info("Ended every watch: the server is shutting down", "watches", len(ending))
	}
	return len(ending)
}

// terminateAll closes every watcher: after a relist the cache cannot tell
// them what they missed, so they resume or relist on their own. It runs
// inside the state's exclusive hold that leaves or replaces the state they
// started from (goNotReady, relist), so no watcher registers against it.
func (c *Cacher) terminateAll() {
	for _, w := range c.hub.RemoveAll() {
		c.left(w)
		w.Terminate()
	}
}

// left counts a watcher the hub no longer has.
func (c *Cacher) left(w *hub.Watcher) { w.Leaving(c.metrics.WatcherLeft) }

// keys lists the cached keys once the cache has caught up with etcd.
func (c *Cacher) keys(ctx context.Context) ([]string, error) {
	rv, err := c.storageRV(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.waitFresh(ctx, rv); err != nil {
		return nil, err
	}
	return c.state.Keys(), nil
}

// GroupResource is the resource the cache holds.
func (c *Cacher) GroupResource() schema.GroupResource { return c.cfg.GroupResource }

// Versioner implements storage.Interface.
func (c *Cacher) Versioner() storage.Versioner { return c.cfg.Versioner }

// Stats implements storage.Interface.
func (c *Cacher) Stats(ctx context.Context) (storage.Stats, error) { return c.storage.Stats(ctx) }

// ReadinessCheck implements storage.Interface.
func (c *Cacher) ReadinessCheck() error {
	if !c.Ready() {
		return storage.ErrStorageNotReady
	}
	return nil
}

// RequestWatchProgress implements storage.Interface.
func (c *Cacher) RequestWatchProgress(ctx context.Context) error {
	//lint:ignore SA1019 it is part of storage.Interface, which the cache implements
	return c.storage.RequestWatchProgress(ctx)
}

// GetCurrentResourceVersion implements storage.Interface.
func (c *Cacher) GetCurrentResourceVersion(ctx context.Context) (uint64, error) {
	return c.storage.GetCurrentResourceVersion(ctx)
}

// EnableResourceSizeEstimation implements storage.Interface.
func (c *Cacher) EnableResourceSizeEstimation(f storage.KeysFunc) error {
	return c.storage.EnableResourceSizeEstimation(f)
}

// CompactRevision implements storage.Interface.
func (c *Cacher) CompactRevision() int64 { return c.storage.CompactRevision() }
