package feed

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/metadata"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachemetrics"
	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
	"github.com/watchkeeper/watchkeeper/cacher/internal/state"
)

// Feed is what the cache's storage feed keeps: the reflector (its
// list, its watch and the retries, reflector.go and
// storage_watch_retry.go), the liveness and consistency checks on their
// own timer (feed_checks.go), the progress requester (progress_requester.go) and
// the backfills (backfill.go). Each field is safe on its own (atomics, or
// a type with its own lock) or owned by one goroutine, as its comment says.
type Feed struct {
	// What the Cacher gives it: the resource's settings and storage, the
	// state it is the only writer of, where the applied events go (the
	// dispatcher's input), and endWatchers, which closes every client
	// watch inside the state's exclusive hold that replaces or leaves the
	// state they started from.
	cfg         Config
	storage     storage.Interface
	state       *state.State
	trigger     *objects.Trigger
	clock       clock.WithTicker
	metrics     *cachemetrics.Resource
	logger      klog.Logger
	stopCh      <-chan struct{}
	wg          *sync.WaitGroup
	ctx         context.Context // ends when the cache stops
	incoming    chan<- *objects.Event
	endWatchers func()

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
	answers    progressAnswers
	// verifying is whether a check of etcd's revision after a silence runs.
	verifying atomic.Bool
	// silenced is set while the cache is not ready because its storage
	// watch was called silent and re-opened, until that watch answers.
	silenced atomic.Bool
	// checkingConsistency is whether a consistency check runs.
	checkingConsistency atomic.Bool
	// backfills runs one history backfill at a time (backfill.go).
	backfills backfiller
	// siblings is the last cached object of each kin, the reflector's own
	// but for its count (siblings.go).
	siblings siblings
	// forcedEvictionLog limits the capacity warning; only the reflector uses it.
	forcedEvictionLog cachemetrics.EveryInterval
	// watchEnd ends the storage watch when the liveness or the consistency
	// check says so (storage_liveness.go).
	watchEnd watchEnd
	// budget is the memory budget's decisions, the reflector's own;
	// overBudget, budgetCount and budgetAvg what it decided, for everyone
	// (budget.go). handOver moves the Cacher's watchers to etcd watches in
	// the exclusive hold that lets go of the state.
	budget                 budget
	overBudget             atomic.Bool
	budgetCount, budgetAvg atomic.Int64
	handOver               func()
	// nextConsistencyCheck is when the cache next compares itself with
	// etcd (consistency.go); only the feedChecks goroutine uses it.
	nextConsistencyCheck time.Time
}

// Env is what the cache gives its feed besides the settings: see the
// fields of Feed of the same names. Ctx ends when the cache stops.
type Env struct {
	Storage     storage.Interface
	State       *state.State
	Trigger     *objects.Trigger
	Clock       clock.WithTicker
	Metrics     *cachemetrics.Resource
	Logger      klog.Logger
	Stop        <-chan struct{}
	WG          *sync.WaitGroup
	Ctx         context.Context
	Incoming    chan<- *objects.Event
	EndWatchers func()
	HandOver    func()
}

// New is the feed of one resource's cache; start runs it.
func New(cfg Config, env Env) *Feed {
	gr := cfg.GroupResource.String()
	f := &Feed{
		cfg: cfg, storage: env.Storage, state: env.State, trigger: env.Trigger, clock: env.Clock,
		metrics: env.Metrics, logger: env.Logger, stopCh: env.Stop, wg: env.WG,
		incoming: env.Incoming, endWatchers: env.EndWatchers, handOver: env.HandOver,
		budget:            budget{max: cfg.MaxBytes},
		watchMetadata:     metadata.New(map[string]string{"source": "watchkeeper", "resource": gr}),
		backfillMetadata:  metadata.New(map[string]string{"source": "watchkeeper-backfill", "resource": gr}),
		forcedEvictionLog: cachemetrics.EveryInterval{Interval: 10 * time.Second},
	}
	f.ctx = metadata.NewOutgoingContext(env.Ctx, f.watchMetadata)
	f.progress = newProgressRequester(f.ctx, f.stopCh, f.wg, f.clock, f.sendProgressRequest)
	return f
}

// Start runs the feed's goroutines, the reflector and the feed checks,
// until the cache stops (they are on the cache's WaitGroup).
func (f *Feed) Start() {
	f.wg.Add(2)
	go f.reflectLoop()
	go f.feedChecks()
}

// BackfillState is whether a backfill runs and how many resumes wait for
// one.
func (f *Feed) BackfillState() (running bool, waiting int) { return f.backfills.state() }

// ProgressIdle is whether the progress requester has no loop running and
// nobody waiting.
func (f *Feed) ProgressIdle() bool { return f.progress.idleNow() }

// LastHeard is when the storage watch last delivered anything, progress
// notifications included (zero before the first watch).
func (f *Feed) LastHeard() time.Time {
	if n := f.heardNanos.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// Config is what the feed needs of the cache's Config.
type Config struct {
	GroupResource             schema.GroupResource
	ResourcePrefix            string
	Versioner                 storage.Versioner
	KeyFunc                   func(runtime.Object) (string, error)
	GetAttrsFunc              storage.AttrFunc
	NewListFunc               func() runtime.Object
	HistoryCapacity           int
	EventsHistoryWindow       time.Duration
	StorageSilenceTimeout     time.Duration
	StorageWatchWithoutPrevKV bool
	ListBackfillRevisions     uint64
	BackfillMaxRevisions      uint64
	MaxBytes                  int64
	BudgetCheckPeriod         time.Duration
	ShareSiblings             bool
	// Compactor, when set, holds the cache's objects in compact form.
	Compactor *objects.Compactor
}

// SiblingKins is how many kins' last objects the feed keeps for sharing
// (siblings.go).
func (f *Feed) SiblingKins() int { return int(f.siblings.kins.Load()) }

// GoNotReady takes the cache out of service for why: pending until a list
// or its storage watch mends it, or stopped for good; alsoLocked runs in
// the same hold of the state's lock (state.State.GoNotReady). A transition
// from ready is counted (not_ready_total), so an operator sees why reads
// went to etcd or got 429.
func (f *Feed) GoNotReady(why string, alsoLocked func()) {
	if f.state.GoNotReady(why == cachemetrics.NotReadyStopped, f.clock.Now(), alsoLocked) {
		f.metrics.WentNotReady(why)
	}
}
