package cacher

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/watchkeeper/watchkeeper/bookmarks"
	"github.com/watchkeeper/watchkeeper/cacher/internal/cachemetrics"
	"github.com/watchkeeper/watchkeeper/cacher/internal/feed"
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
// It is a facade over owners that each guard themselves with a lock of
// their own (the order is in doc.go): the storage feed (internal/feed: the
// reflector, its retries, the liveness and consistency checks, backfills),
// the only writer of the state (internal/state: the objects, history and
// snapshots), and the hub (internal/hub: the watchers and the bookmark
// calendar), which the Cacher's dispatch loop drives.
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

	// life is the cache's stop: its channel, its context and the
	// WaitGroup of its goroutines.
	life lifecycle
	// dropLog limits the log of what could not be built (dropped.go).
	dropLog dropLog

	// state is the objects, history and snapshots (state.State); hub the
	// watchers and the bookmark calendar. Each has its own lock; the order
	// is in doc.go.
	state *state.State
	hub   *hub.Hub
	// feed is the storage feed (internal/feed), the state's only writer;
	// loop the hub's dispatcher goroutine (events, the bookmark tick,
	// shutdown bookmarks); watcherEnv what every watcher of this cache is
	// given.
	feed       *feed.Feed
	loop       *hub.Loop
	watcherEnv *hub.WatcherEnv
	// relays are the watchers handed to etcd while the resource was over
	// its memory budget (budget_relay.go).
	relays relays
}

// lifecycle is the cache's stop: Stop runs once, and ctx ends with it.
type lifecycle struct {
	stopOnce sync.Once
	// stopCh closes when the cache stops; wg owns every goroutine of the
	// cache, which Stop waits for.
	stopCh chan struct{}
	wg     sync.WaitGroup
	// ctx ends when the cache stops; background requests use it.
	ctx       context.Context
	cancelCtx context.CancelFunc
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
	var compactor *objects.Compactor
	if cfg.Compact {
		if compactor, err = objects.NewCompactor(cfg.Codec, cfg.Versioner, trig, cfg.Indexers); err != nil {
			return nil, err
		}
	}
	metrics := cachemetrics.NewResource(cfg.GroupResource, feed.BackfillCooldown)
	c := &Cacher{
		trigger: trig,
		cfg:     cfg,
		storage: cfg.Storage,
		clock:   cfg.Clock,
		metrics: metrics,
		logger:  klog.Background().WithValues("resource", cfg.GroupResource.String()),
		state: state.New(cfg.ResourcePrefix, cfg.Indexers, cfg.EventsHistoryWindow, cfg.HistoryCapacity,
			utilfeature.DefaultFeatureGate.Enabled(features.ListFromCacheSnapshot), metrics, cfg.Clock.Now()),
		hub: hub.New(bookmarks.Policy{Frequency: cfg.BookmarkFrequency, PreDeadlineOffset: cfg.BookmarkPreDeadlineOffset},
			cfg.BookmarkGranularity, cfg.Clock),
	}
	c.life.stopCh = make(chan struct{})
	c.life.ctx, c.life.cancelCtx = context.WithCancel(context.Background())
	c.watcherEnv = &hub.WatcherEnv{
		Clock: c.clock, Buffer: cfg.WatcherBuffer, Stop: c.life.stopCh, WG: &c.life.wg,
		Forget: c.forgetWatcher, Moved: c.metrics.WatcherMoved, Bookmark: c.bookmarkObject, Dropped: c.dropped,
		Latency: &hub.DispatchLatency{Stages: cachemetrics.DispatchStages.ForResource(c.cfg.GroupResource)},
		Feed:    c.resumeStalled,
	}
	c.loop = c.newLoop()
	c.feed = feed.New(feed.Config{
		GroupResource: cfg.GroupResource, ResourcePrefix: cfg.ResourcePrefix, Versioner: cfg.Versioner,
		KeyFunc: cfg.KeyFunc, GetAttrsFunc: cfg.GetAttrsFunc, NewListFunc: cfg.NewListFunc,
		HistoryCapacity: cfg.HistoryCapacity, EventsHistoryWindow: cfg.EventsHistoryWindow,
		StorageSilenceTimeout: cfg.StorageSilenceTimeout, StorageWatchWithoutPrevKV: cfg.StorageWatchWithoutPrevKV,
		ListBackfillRevisions: cfg.ListBackfillRevisions, BackfillMaxRevisions: cfg.BackfillMaxRevisions,
		MaxBytes: cfg.MaxBytes, BudgetCheckPeriod: cfg.BudgetCheckPeriod, ShareSiblings: cfg.ShareSiblings && !cfg.Compact,
		Compactor: compactor,
	}, feed.Env{
		Storage: c.storage, State: c.state, Trigger: trig, Clock: c.clock, Metrics: metrics, Logger: c.logger,
		Stop: c.life.stopCh, WG: &c.life.wg, Ctx: c.life.ctx, Incoming: c.loop.Incoming(), EndWatchers: c.terminateAll,
		HandOver: c.handOverLocked,
	})
	if utilfeature.DefaultFeatureGate.Enabled(features.SizeBasedListCostEstimate) {
		// The store estimates object sizes for list cost from the keys it is
		// told exist; the cache knows them without asking etcd.
		if err := c.storage.EnableResourceSizeEstimation(c.keys); err != nil {
			return nil, fmt.Errorf("enabling size estimation for %v: %w", c.cfg.GroupResource, err)
		}
	}
	c.loop.Start()
	c.feed.Start()
	c.logger.Info("Watch cache started",
		"bookmarkFrequency", cfg.BookmarkFrequency, "preDeadlineOffset", cfg.BookmarkPreDeadlineOffset,
		"historyWindow", cfg.EventsHistoryWindow, "granularity", cfg.BookmarkGranularity, "jitter", cfg.BookmarkJitter)
	return c, nil
}

// Stop ends every watcher and the cache's goroutines and waits for them. It
// does not stop the wrapped storage. Calling it twice is fine.
func (c *Cacher) Stop() {
	c.life.stopOnce.Do(func() {
		close(c.life.stopCh)
		c.life.cancelCtx()
		c.feed.GoNotReady(cachemetrics.NotReadyStopped, c.terminateAll)
		c.life.wg.Wait()
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
	if c.relays.remove(w) {
		// On etcd: the hub has it no more, and Drain would wait for a
		// feed that just ended.
		w.Terminate()
		return
	}
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

// terminateSlow closes a watcher that could not keep up, with stalling off
// (stall.go). One whose client has been handed its initial-events-end
// bookmark but not read it yet is drained and closed gracefully, so the
// client resumes from that bookmark instead of relisting; the others are
// cut off.
func (c *Cacher) terminateSlow(w *hub.Watcher) {
	graceful := w.ListState() == watchlist.BookmarkReceived
	c.metrics.TerminatedWatchers.Inc()
	c.metrics.SlowWatcher(cachemetrics.SlowClosed)
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
	relayed := c.relays.all()
	for _, w := range relayed {
		// Its feed sees its etcd watch end and drains it.
		c.relays.remove(w)
		w.Drain()
	}
	if n := len(ending) + len(relayed); n > 0 {
		c.logger.V(2).Info("Ended every watch: the server is shutting down", "watches", n)
	}
	return len(ending) + len(relayed)
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
	if c.feed.OverBudget() {
		// None held: Stats answers from the budget's count meanwhile,
		// and the relist gives the store every key's size again.
		return nil, nil
	}
	if feed.Measuring(ctx) {
		return c.state.Keys(), nil
	}
	rv, err := c.feed.StorageRV(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.feed.WaitFresh(ctx, rv); err != nil {
		return nil, err
	}
	return c.state.Keys(), nil
}

// GroupResource is the resource the cache holds.
func (c *Cacher) GroupResource() schema.GroupResource { return c.cfg.GroupResource }

// Versioner implements storage.Interface.
func (c *Cacher) Versioner() storage.Versioner { return c.cfg.Versioner }

// Stats implements storage.Interface.
func (c *Cacher) Stats(ctx context.Context) (storage.Stats, error) {
	if c.feed.OverBudget() {
		return c.feed.BudgetStats(), nil
	}
	return c.storage.Stats(ctx)
}

// ReadinessCheck implements storage.Interface.
func (c *Cacher) ReadinessCheck() error {
	// Over its budget the resource is served, from etcd.
	if !c.Ready() && !c.feed.OverBudget() {
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
