package options

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Upstream's hardcoded values, which are the defaults here.
const (
	DefaultBookmarkFrequency         = time.Minute
	DefaultBookmarkPreDeadlineOffset = 2 * time.Second
	DefaultBookmarkGranularity       = time.Second
	DefaultBookmarkJitter            = 0.25
	// DefaultEventsHistoryCapacity bounds the history's memory under a write
	// storm: at 100,000 events of ~2KB, about 200MB per resource at worst.
	DefaultEventsHistoryCapacity = 100_000
	// MaxDuration bounds every duration flag: no schedule needs more than a
	// year, and the bound keeps the sums Validate checks from overflowing.
	MaxDuration = 365 * 24 * time.Hour
	// DefaultStorageSilenceTimeout is how long etcd may say nothing on a
	// resource's watch, progress requests included, before its cache goes not
	// ready and re-opens that watch.
	DefaultStorageSilenceTimeout = 15 * time.Second
	// DefaultHistoryMargin is what the history keeps beyond one bookmark
	// period when no window is set, so the newest bookmark is still resumable.
	DefaultHistoryMargin = 15 * time.Second
)

// Flag names, for error messages and for callers that look flags up.
const (
	FlagBookmarkFrequency         = "watch-cache-bookmark-frequency"
	FlagBookmarkPreDeadlineOffset = "watch-cache-bookmark-pre-deadline-offset"
	FlagEventsHistoryWindow       = "watch-cache-events-history-window"
	FlagBookmarkGranularity       = "watch-cache-bookmark-granularity"
	FlagBookmarkJitter            = "watch-cache-bookmark-jitter"
	FlagEventsHistoryCapacity     = "watch-cache-events-history-capacity"
	FlagStorageSilenceTimeout     = "watch-cache-storage-silence-timeout"
	FlagBookmarkMaxStaleness      = "watch-cache-bookmark-max-staleness"
	FlagStallSlowWatchers         = "watch-cache-stall-slow-watchers"
	FlagMaxBytes                  = "watch-cache-max-bytes"
	FlagShareSiblings             = "watch-cache-share-siblings"
	FlagCompact                   = "watch-cache-compact"
)

// WatchCacheOptions configures the watch cache of every resource.
type WatchCacheOptions struct {
	// BookmarkFrequency is how often a watcher that asked for bookmarks gets
	// one. Upstream: 1m.
	BookmarkFrequency time.Duration
	// BookmarkPreDeadlineOffset is how long before a watch's deadline it gets a
	// last bookmark, so its client resumes instead of relisting. Upstream: 2s.
	// It must be less than BookmarkFrequency. Left at its default (not given
	// on the command line, and still DefaultBookmarkPreDeadlineOffset), it
	// follows the frequency: see EffectiveBookmarkPreDeadlineOffset.
	BookmarkPreDeadlineOffset time.Duration
	// EventsHistoryWindow is the least time past events are kept for
	// clients resuming a watch: a floor, not a cut. Older events stay until
	// the history needs their room, as in upstream's cache. 0 means
	// BookmarkFrequency + 15s, upstream's rule.
	EventsHistoryWindow time.Duration
	// BookmarkGranularity is the width of a bookmark calendar slot and the
	// base period of its tick: a bookmark due at X goes out within
	// (X - granularity, X + granularity*(1 + BookmarkJitter)), the tick
	// being at most that long. Upstream: 1s.
	BookmarkGranularity time.Duration
	// BookmarkJitter is the tick's jitter factor: each tick waits
	// granularity * (1 + r*jitter) for a fresh random r in [0, 1), so ticks of
	// many resources and servers do not line up. 0 means no jitter.
	// Upstream: 0.25.
	BookmarkJitter float64
	// EventsHistoryCapacity caps how many events one resource's history
	// holds, whatever the window. When a write storm hits it, events younger
	// than the window are dropped (counted in
	// watchkeeper_watch_cache_history_forced_evictions_total and logged), and
	// clients resuming from them relist. Upstream sizes its history
	// dynamically up to a similar fixed bound.
	EventsHistoryCapacity int
	// StorageSilenceTimeout is how long a resource's etcd watch may deliver
	// nothing before the cache calls it lost: after a third of it the cache
	// asks etcd for progress, and after all of it without an answer it goes
	// not ready (reads get 429, /readyz fails; client watches stay open) and
	// re-opens its etcd watch from its resourceVersion, relisting only on a
	// 410 or when the re-opens keep failing. etcd's client otherwise retries
	// a dead stream silently and the cache would keep serving a stale state.
	// 0 turns the check off.
	StorageSilenceTimeout time.Duration
	// BookmarkMaxStaleness bounds how long before it is sent a bookmark's RV
	// was last confirmed current by etcd: when the cache has heard nothing
	// from etcd for nearly that long and bookmarks are about to be due, it
	// asks etcd for progress once for the resource, so caching proxies and
	// consistent-read layers that judge freshness by bookmarks see at most
	// this lag. 0 turns it off (upstream's behaviour: a bookmark carries
	// whatever RV the cache last saw).
	BookmarkMaxStaleness time.Duration
	// StallSlowWatchers: a watch whose client falls behind (its queue of
	// events full, or nothing read for 10s) gives up its queue, keeps only
	// its position and is fed again from the event history when its client
	// reads again, instead of being closed; it ends with 410 Gone only when
	// the history no longer holds its position. On by default: a client is
	// never worse off (a closed watch would resume from the same position,
	// or relist). Off, such a watch is closed as upstream's cache closes it:
	// a server that would rather shed a client that stopped reading (whose
	// watch otherwise holds its HTTP stream and two goroutines until its
	// deadline) turns it off.
	StallSlowWatchers bool
	// MaxBytes is the most a resource's cache may hold, counted as the
	// serialized size of its objects in etcd (the store's size estimate):
	// past it the resource is served from etcd, its watches included, until
	// it shrinks below nine tenths of it. 0 means no budget (upstream has
	// none).
	MaxBytes int64
	// ShareSiblings: an object entering a cache uses the memory of every
	// part it has equal to the last cached object of its kin (its
	// controller's, else its generateName's, else its namespace's), so a
	// ReplicaSet's pods hold their template once. On by default; off, each
	// object holds its own decoded copy, as in upstream's cache, and the
	// cache saves the walk of each object beside its sibling as it enters
	// (a few microseconds a pod).
	ShareSiblings bool
	// Compact holds each cached object serialized (with its key, labels,
	// fields and RV beside it) and decodes it on every read: a fraction of
	// the heap, for a decode per object a list returns and per event a
	// watch is sent. Off by default, it is meant per resource
	// (compact=true in an override), for resources listed and watched
	// little for their size.
	Compact bool
	// ResourceOverrides sets part of the schedule per group/resource; see
	// --watch-cache-resource-overrides.
	ResourceOverrides map[schema.GroupResource]ResourceOverride

	// preDeadlineOffsetGiven is set when the pre-deadline offset was given
	// (on the command line, or by an override): it then stays as given,
	// even at the default's value.
	preDeadlineOffsetGiven bool
}

// NewWatchCacheOptions returns the options with upstream's values.
func NewWatchCacheOptions() *WatchCacheOptions {
	return &WatchCacheOptions{
		BookmarkFrequency:         DefaultBookmarkFrequency,
		BookmarkPreDeadlineOffset: DefaultBookmarkPreDeadlineOffset,
		BookmarkGranularity:       DefaultBookmarkGranularity,
		BookmarkJitter:            DefaultBookmarkJitter,
		EventsHistoryCapacity:     DefaultEventsHistoryCapacity,
		StorageSilenceTimeout:     DefaultStorageSilenceTimeout,
		StallSlowWatchers:         true,
		ShareSiblings:             true,
	}
}

// AddFlags registers the options' flags on fs.
func (o *WatchCacheOptions) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.BookmarkFrequency, FlagBookmarkFrequency, o.BookmarkFrequency,
		"How often a watch that allows bookmarks gets one, even when nothing changed. "+
			"Must be > 0 and >= --"+FlagBookmarkGranularity+". Upstream hardcodes 1m.")
	fs.Var(preDeadlineOffsetValue{o}, FlagBookmarkPreDeadlineOffset,
		"How long before a watch's deadline it gets a last bookmark, so the client resumes from it instead of relisting. "+
			"Must be >= 0 and < --"+FlagBookmarkFrequency+". Unless given, it is 2s or half of --"+FlagBookmarkFrequency+
			", whichever is less, so that setting only the frequency is always valid. Upstream hardcodes 2s.")
	fs.DurationVar(&o.EventsHistoryWindow, FlagEventsHistoryWindow, o.EventsHistoryWindow,
		"The least time past events are kept for clients resuming a watch (a floor, not a cut): a watch from a resourceVersion "+
			"inside the window always resumes. Older events stay while the history has room (at least 100 events, up to --"+FlagEventsHistoryCapacity+") "+
			"and leave only to make room, as in upstream's cache; a resume from before the oldest event kept gets 410 Gone. "+
			"0 means --"+FlagBookmarkFrequency+" + 15s. When set, must be >= --"+FlagBookmarkFrequency+" + --"+FlagBookmarkGranularity+
			" so the newest bookmark is always resumable. Upstream hardcodes 75s (1m + 15s).")
	fs.DurationVar(&o.BookmarkGranularity, FlagBookmarkGranularity, o.BookmarkGranularity,
		"Width of a bookmark calendar slot and base period of the bookmark tick: a bookmark due at X is sent within "+
			"(X - granularity, X + granularity * (1 + jitter)). Must be > 0. Upstream hardcodes 1s.")
	fs.Float64Var(&o.BookmarkJitter, FlagBookmarkJitter, o.BookmarkJitter,
		"Jitter factor of the bookmark tick: each tick waits granularity * (1 + r*jitter), r random in [0, 1). "+
			"0 disables jitter. Must be >= 0 and < 1. Upstream hardcodes 0.25.")
	fs.IntVar(&o.EventsHistoryCapacity, FlagEventsHistoryCapacity, o.EventsHistoryCapacity,
		"Most events one resource's history keeps, whatever the window: a bound on memory under a write storm. "+
			"When it forces out events younger than the window, clients resuming from them get 410 and relist, "+
			"and watchkeeper_watch_cache_history_forced_evictions_total counts it. Must be > 0.")
	fs.DurationVar(&o.StorageSilenceTimeout, FlagStorageSilenceTimeout, o.StorageSilenceTimeout,
		"How long a resource's etcd watch may deliver nothing before its cache calls it lost: after a third of it the cache "+
			"requests watch progress; after all of it unanswered, unless etcd's revision shows nothing new or (etcd being ahead) the watch answers within "+
			"as long again, the cache goes not ready (429, /readyz fails; watches stay open) and re-opens its etcd watch from its resourceVersion, "+
			"ready again once etcd answers; it relists only on a 410 or after 30s of failing re-opens. "+
			"It is checked every second, whatever the bookmark settings, so it takes effect to within a second. 0 turns the check off. Upstream has no such check.")
	fs.DurationVar(&o.BookmarkMaxStaleness, FlagBookmarkMaxStaleness, o.BookmarkMaxStaleness,
		"Bound on how stale a bookmark's resourceVersion may be: when the cache has heard nothing from etcd for nearly this long "+
			"and bookmarks are about to be due, it requests watch progress once for the resource first. 0 turns it off "+
			"(upstream: a bookmark carries the last RV the cache saw). When set, must be at least 2 x --"+FlagBookmarkGranularity+".")
	fs.BoolVar(&o.StallSlowWatchers, FlagStallSlowWatchers, o.StallSlowWatchers,
		"A watch whose client falls behind (1,024 events queued, or none read for 10s) gives up its queue, keeps only its "+
			"position and is fed again from the event history when the client reads again; it ends with 410 Gone only when the "+
			"history (--"+FlagEventsHistoryWindow+", --"+FlagEventsHistoryCapacity+") no longer holds that position. "+
			"false closes such a watch at once, as upstream's cache does, and the client resumes or relists on its own: "+
			"for servers that would rather shed a client that stopped reading than keep its watch open until its deadline. "+
			"Upstream closes a watcher after about 100ms of blocking (KEP-6268 proposes stall and resume, off by default).")
	fs.Var(bytesValue{&o.MaxBytes}, FlagMaxBytes,
		"The most memory one resource's watch cache may hold, as the serialized size of its objects in etcd "+
			"(a quantity: 512Mi, 2G; 0: no budget, as upstream). Past it the cache says so (log, metric "+
			"watchkeeper_watch_cache_over_budget), lets go of its objects and serves the resource from etcd: reads, new "+
			"watches, and its open watches, each continued from etcd where it stood; it caches the resource again once "+
			"it is below nine tenths of the budget. Per resource with --"+FlagResourceOverrides+" max-bytes=. "+
			"Needs the SizeBasedListCostEstimate feature gate (on by default).")
	fs.BoolVar(&o.ShareSiblings, FlagShareSiblings, o.ShareSiblings,
		"Objects made from one template (a controller's, a generateName's, else a namespace's) hold what they have equal "+
			"once in the cache: each object entering it points every part equal to the last cached object of its kin at "+
			"that object's memory (a ReplicaSet's pods: their spec, labels and managed fields). false: each cached object "+
			"holds its own decoded copy, as in upstream's cache, saving the walk of each object beside its sibling as it "+
			"enters (a few microseconds a pod) at the cost of the memory.")
	fs.BoolVar(&o.Compact, FlagCompact, o.Compact,
		"Hold each cached object in compact form: serialized with the resource's storage codec, with its key, labels, fields "+
			"and resourceVersion beside it, decoded for every list, get and watch event that reads it. A fraction of a decoded "+
			"object's heap (docs/performance.md), for a decode per object a list returns and per event the cache fans out; "+
			"--"+FlagShareSiblings+" has nothing to share then. Meant per resource: --"+FlagResourceOverrides+" compact=true.")
	fs.Var(overridesValue{&o.ResourceOverrides}, FlagResourceOverrides,
		"Settings for one resource (its schedule, its memory budget), e.g. widgets.demo.watchkeeper.io:bookmark-frequency=5s,events-history-window=20s "+
			"(repeat the flag for more resources; the core group is the resource alone). Keys: "+strings.Join(overrideKeys, ", ")+
			". Each resource's resulting schedule must pass the same rules as the global flags (a pre-deadline offset given nowhere follows the resource's frequency); "+
			"a resource the server does not serve is an error at start-up where the server knows all it serves (the sample apiserver), "+
			"and only logged where a CRD may serve it later (kube-apiserver).")
}

// preDeadlineOffsetValue is --watch-cache-bookmark-pre-deadline-offset: a
// duration flag that records that it was given, so that the offset stops
// following the frequency.
type preDeadlineOffsetValue struct{ o *WatchCacheOptions }

func (v preDeadlineOffsetValue) Type() string { return "duration" }

func (v preDeadlineOffsetValue) String() string {
	if v.o == nil {
		return ""
	}
	return v.o.BookmarkPreDeadlineOffset.String()
}

func (v preDeadlineOffsetValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	v.o.BookmarkPreDeadlineOffset, v.o.preDeadlineOffsetGiven = d, true
	return nil
}

// EffectiveBookmarkPreDeadlineOffset is the pre-deadline offset in force.
// One that was given (on the command line, by an override, or set to
// anything but the default) is taken as it is, and Validate holds it to the
// rule offset < frequency. Otherwise it is the default 2s, capped at half the
// frequency: a default must not make a valid frequency fail, and the rule
// stays because bookmarks.Policy stops the heartbeat at the pre-deadline
// bookmark, so an offset at or above the frequency would leave a watch that
// long without a bookmark before its deadline, and the bookmark its client
// resumes from older than the history window promises to keep
// (frequency + granularity).
func (o *WatchCacheOptions) EffectiveBookmarkPreDeadlineOffset() time.Duration {
	if o.preDeadlineOffsetGiven || o.BookmarkPreDeadlineOffset != DefaultBookmarkPreDeadlineOffset || o.BookmarkFrequency <= 0 {
		return o.BookmarkPreDeadlineOffset
	}
	return min(DefaultBookmarkPreDeadlineOffset, o.BookmarkFrequency/2)
}

// EffectiveEventsHistoryWindow is the history window in force: the configured
// one, or BookmarkFrequency + 15s when none is set.
func (o *WatchCacheOptions) EffectiveEventsHistoryWindow() time.Duration {
	if o.EventsHistoryWindow == 0 {
		return o.BookmarkFrequency + DefaultHistoryMargin
	}
	return o.EventsHistoryWindow
}

// Validate returns every problem with the options, each naming its flag and
// the rule it breaks; nil when they are valid.
func (o *WatchCacheOptions) Validate() []error {
	if o == nil {
		return nil
	}
	var errs []error
	bad := func(flag string, value any, rule string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s=%v: %s", flag, value, fmt.Sprintf(rule, args...)))
	}

	for _, d := range []struct {
		flag  string
		value time.Duration
	}{
		{FlagBookmarkFrequency, o.BookmarkFrequency},
		{FlagBookmarkPreDeadlineOffset, o.BookmarkPreDeadlineOffset},
		{FlagEventsHistoryWindow, o.EventsHistoryWindow},
		{FlagBookmarkGranularity, o.BookmarkGranularity},
		{FlagStorageSilenceTimeout, o.StorageSilenceTimeout},
		{FlagBookmarkMaxStaleness, o.BookmarkMaxStaleness},
	} {
		if d.value > MaxDuration {
			bad(d.flag, d.value, "must be at most %v", MaxDuration)
		}
	}
	// The window rule adds durations; with one out of range the sum could
	// overflow and pass, so it is checked only when all are in range.
	inRange := errs == nil
	if o.BookmarkGranularity <= 0 {
		bad(FlagBookmarkGranularity, o.BookmarkGranularity, "must be greater than 0")
	}
	if o.BookmarkFrequency <= 0 {
		bad(FlagBookmarkFrequency, o.BookmarkFrequency, "must be greater than 0")
	} else if o.BookmarkGranularity > 0 && o.BookmarkFrequency < o.BookmarkGranularity {
		bad(FlagBookmarkFrequency, o.BookmarkFrequency, "must be at least --%s (%v): a bookmark cannot be scheduled finer than a slot",
			FlagBookmarkGranularity, o.BookmarkGranularity)
	}
	if offset := o.EffectiveBookmarkPreDeadlineOffset(); offset < 0 {
		bad(FlagBookmarkPreDeadlineOffset, offset, "must not be negative")
	} else if o.BookmarkFrequency > 0 && offset >= o.BookmarkFrequency {
		bad(FlagBookmarkPreDeadlineOffset, offset, "must be less than --%s (%v)",
			FlagBookmarkFrequency, o.BookmarkFrequency)
	}
	if o.EventsHistoryWindow < 0 {
		bad(FlagEventsHistoryWindow, o.EventsHistoryWindow, "must not be negative (0 means --%s + %v)",
			FlagBookmarkFrequency, DefaultHistoryMargin)
	} else if inRange && o.BookmarkFrequency > 0 && o.BookmarkGranularity > 0 {
		minWindow := o.BookmarkFrequency + o.BookmarkGranularity
		switch window := o.EffectiveEventsHistoryWindow(); {
		case window >= minWindow:
		case o.EventsHistoryWindow > 0:
			bad(FlagEventsHistoryWindow, window,
				"must be at least --%s + --%s (%v) so the newest bookmark is always resumable",
				FlagBookmarkFrequency, FlagBookmarkGranularity, minWindow)
		default:
			bad(FlagEventsHistoryWindow, o.EventsHistoryWindow,
				"defaults to --%s + %v (%v), which is less than --%s + --%s (%v): set it explicitly so the newest bookmark is always resumable",
				FlagBookmarkFrequency, DefaultHistoryMargin, window, FlagBookmarkFrequency, FlagBookmarkGranularity, minWindow)
		}
	}
	if o.MaxBytes < 0 {
		bad(FlagMaxBytes, o.MaxBytes, "must not be negative (0 means no budget)")
	}
	if o.EventsHistoryCapacity <= 0 {
		bad(FlagEventsHistoryCapacity, o.EventsHistoryCapacity, "must be greater than 0")
	}
	if o.StorageSilenceTimeout < 0 {
		bad(FlagStorageSilenceTimeout, o.StorageSilenceTimeout, "must not be negative (0 turns the check off)")
	}
	if o.BookmarkMaxStaleness < 0 {
		bad(FlagBookmarkMaxStaleness, o.BookmarkMaxStaleness, "must not be negative (0 turns it off)")
	} else if inRange && o.BookmarkMaxStaleness > 0 && o.BookmarkGranularity > 0 && o.BookmarkMaxStaleness < 2*o.BookmarkGranularity {
		bad(FlagBookmarkMaxStaleness, o.BookmarkMaxStaleness, "must be at least 2 x --%s (%v): the tick asks for progress one tick ahead",
			FlagBookmarkGranularity, 2*o.BookmarkGranularity)
	}
	// Written as a negation so NaN is refused too.
	if !(o.BookmarkJitter >= 0 && o.BookmarkJitter < 1) {
		bad(FlagBookmarkJitter, o.BookmarkJitter, "must be at least 0 and less than 1")
	}
	return append(errs, o.validateOverrides(errs)...)
}
