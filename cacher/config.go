package cacher

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

const (
	// DefaultWatcherBuffer is how many events may wait for a client that is
	// behind (not a flag: decorator.Schedule sets it). The dispatcher never
	// waits for a client, so this is what a burst may put in front of one:
	// a write storm of a thousand objects still reaches a client that keeps
	// reading. Memory is spent only while a client is behind, a few words
	// per event.
	DefaultWatcherBuffer = 1024
	// DefaultListBackfillRevisions is how far before each list the history
	// is read back from etcd at once (not a flag: decorator.Schedule sets
	// it). At a restart, clients resume from the RV of the old server's
	// last bookmark, some hundreds of revisions before the new list on a
	// busy cluster (docs/kube-load.md). Read on demand, when the first of
	// them resumes, that backfill runs while every client reconnects and
	// takes seconds; read right after the list, it runs before the new
	// server takes requests.
	DefaultListBackfillRevisions = 2000
	// DefaultBackfillMaxRevisions is how far behind the cache's RV a resume
	// may be and still be backfilled (not a flag: decorator.Schedule sets
	// it). etcd serves a watch from an old revision by reading every
	// revision since, of every resource, while it holds its read lock
	// (syncWatchers), and every read etcd gets meanwhile waits once a write
	// waits for that lock: at 100,000 revisions of small pods a plain etcd
	// watch from there held every GET up to 192 ms, the backfill's reads
	// up to 745 ms (hack/bench restart, docs/performance.md). A resume
	// from further back gets its 410 at once, as upstream's; a restart's
	// own gap (the old server bookmarked every watch before it stopped)
	// is some hundreds of revisions.
	DefaultBackfillMaxRevisions = 10_000
	// DefaultBudgetCheckPeriod is how often a cache with a memory budget
	// measures itself: the store's estimate walks the cache's keys, so not
	// on every event.
	DefaultBudgetCheckPeriod = 10 * time.Second
)

// Config describes one resource's watch cache. The first block mirrors what a
// generic.StorageDecorator receives; the second is watchkeeper's schedule.
type Config struct {
	// Storage is the wrapped storage, normally the resource's etcd3 store.
	Storage        storage.Interface
	Versioner      storage.Versioner
	GroupResource  schema.GroupResource
	ResourcePrefix string
	KeyFunc        func(runtime.Object) (string, error)
	NewFunc        func() runtime.Object
	NewListFunc    func() runtime.Object
	GetAttrsFunc   storage.AttrFunc
	// IndexerFuncs are trigger functions: a watcher whose field selector pins
	// one of these fields only hears about events whose object or previous
	// object has that value.
	IndexerFuncs storage.IndexerFuncs
	// Indexers are the store's indexes, used to serve lists whose selector
	// matches one exactly.
	Indexers *cache.Indexers
	Clock    clock.WithTicker

	BookmarkFrequency         time.Duration
	BookmarkPreDeadlineOffset time.Duration
	// EventsHistoryWindow is how long events are kept for resuming watches.
	EventsHistoryWindow time.Duration
	BookmarkGranularity time.Duration
	BookmarkJitter      float64
	// HistoryCapacity caps the number of events kept, whatever the window.
	HistoryCapacity int
	// WatcherBuffer bounds the events queued for a client that is behind;
	// one that falls further behind stalls, or is closed (StallSlowWatchers).
	WatcherBuffer int
	// StallSlowWatchers: a watcher that falls behind (its queue full, or
	// nothing taken for 10s) gives up its queue, keeps only its position,
	// leaves the fan-out, and is fed again from the history when its
	// client reads again; it ends with 410 only when the history no longer
	// holds its position (internal/hub/stall.go). Off, it is closed, as
	// upstream's cache closes it, and its client resumes or relists on its
	// own.
	StallSlowWatchers bool
	// BookmarkMaxStaleness, when set, makes the tick ask etcd for progress
	// before bookmarks come due if the cache has heard nothing from etcd for
	// nearly that long, so a bookmark's RV was confirmed current at most
	// that long before it is sent.
	BookmarkMaxStaleness time.Duration
	// StorageSilenceTimeout is how long the storage watch may deliver
	// nothing, progress requests included, before the cache calls it lost,
	// goes not ready and relists. Zero turns the check off.
	StorageSilenceTimeout time.Duration
	// ListBackfillRevisions: after each list at RV r, the history is read
	// back from etcd to r minus this many revisions, without waiting for a
	// client to resume from there. Zero turns it off (a resume from before
	// the list still backfills on demand).
	ListBackfillRevisions uint64
	// BackfillMaxRevisions: a resume from more than this many revisions
	// behind the cache's RV gets its 410 without a backfill. Zero: no
	// limit (DefaultBackfillMaxRevisions says why there is one).
	BackfillMaxRevisions uint64
	// ShareSiblings: an object entering the cache (listed or added) uses the
	// memory of every part it has equal to the last cached object of its
	// kin: its controller's, else its generateName's, else its namespace's
	// (internal/feed/siblings.go). A ReplicaSet's pods then hold their
	// template once. The price is a walk of the object beside its sibling
	// as it enters, a few microseconds for a pod.
	ShareSiblings bool
	// Compact holds each object serialized with Codec, beside its key,
	// labels, fields and RV, and decodes it for every read: a fraction of
	// a decoded object's heap, for a decode per object a list returns and
	// per event the cache fans out (internal/objects/compact.go). Sharing
	// with siblings has nothing to share then. Needs Codec.
	Compact bool
	// StorageWatchWithoutPrevKV: the cache's own etcd watch asks for no
	// previous values (gate WatchFromStorageWithoutPrevKV). The storage
	// must then name a deleted object from its key: the etcd3 store needs
	// the registry's storage.ReverseKeyFunc.
	StorageWatchWithoutPrevKV bool
	// MaxBytes is the resource's memory budget: the most the cache holds,
	// counted as its objects' serialized size in etcd (the store's size
	// estimate, gate SizeBasedListCostEstimate). Past it the cache lets go
	// of its objects and serves the resource from etcd, its open watches
	// continued from etcd where each stood, until the resource is below
	// nine tenths of it (internal/feed/budget.go). Zero: no budget.
	MaxBytes int64
	// BudgetCheckPeriod is how often a cache with a budget measures its
	// size, and, while over it, how often it counts the resource in etcd
	// to see whether it fits again. Zero: DefaultBudgetCheckPeriod.
	BudgetCheckPeriod time.Duration
	// Codec is the resource's storage codec (the registry's
	// storagebackend.ConfigForResource.Codec). Writes start from the cache
	// under ConsistentGetFromCache only with it: their no-op check compares
	// the encoded object with the new one. Nil keeps writes on etcd's reads.
	Codec runtime.Codec
}

func (c *Config) complete() error {
	if c.Storage == nil {
		return fmt.Errorf("cacher: Storage is required")
	}
	if c.Versioner == nil {
		c.Versioner = storage.APIObjectVersioner{}
	}
	if c.ResourcePrefix == "" {
		return fmt.Errorf("cacher: ResourcePrefix is required")
	}
	if c.KeyFunc == nil || c.NewFunc == nil || c.NewListFunc == nil || c.GetAttrsFunc == nil {
		return fmt.Errorf("cacher: KeyFunc, NewFunc, NewListFunc and GetAttrsFunc are required")
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.Compact && c.Codec == nil {
		return fmt.Errorf("cacher: Compact needs the resource's Codec")
	}
	// Zero is never a default here: the defaults are the options package's
	// (decorator.Schedule turns options into a Config). A knob that can be
	// off (StorageSilenceTimeout, BookmarkMaxStaleness, BookmarkJitter) is
	// off at zero; every other must be set.
	var bad []string
	for _, k := range []struct {
		name string
		ok   bool
	}{
		{"BookmarkFrequency > 0", c.BookmarkFrequency > 0},
		{"BookmarkPreDeadlineOffset >= 0", c.BookmarkPreDeadlineOffset >= 0},
		{"BookmarkGranularity > 0", c.BookmarkGranularity > 0},
		{"EventsHistoryWindow > 0", c.EventsHistoryWindow > 0},
		{"HistoryCapacity > 0", c.HistoryCapacity > 0},
		{"WatcherBuffer > 0", c.WatcherBuffer > 0},
		{"BookmarkJitter >= 0", c.BookmarkJitter >= 0},
		{"BookmarkMaxStaleness >= 0", c.BookmarkMaxStaleness >= 0},
		{"StorageSilenceTimeout >= 0", c.StorageSilenceTimeout >= 0},
		{"MaxBytes >= 0", c.MaxBytes >= 0},
		{"BudgetCheckPeriod >= 0", c.BudgetCheckPeriod >= 0},
	} {
		if !k.ok {
			bad = append(bad, k.name)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("cacher: the schedule needs %s", strings.Join(bad, ", "))
	}
	if c.MaxBytes > 0 && !utilfeature.DefaultFeatureGate.Enabled(features.SizeBasedListCostEstimate) {
		return fmt.Errorf("cacher: a memory budget (MaxBytes, --watch-cache-max-bytes) for %v needs the %s feature gate: "+
			"the budget is counted from the store's size estimate", c.GroupResource, features.SizeBasedListCostEstimate)
	}
	if c.BudgetCheckPeriod == 0 {
		c.BudgetCheckPeriod = DefaultBudgetCheckPeriod
	}
	return nil
}
