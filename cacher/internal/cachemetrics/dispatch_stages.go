package cachemetrics

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/runtime/schema"
	upstream "k8s.io/apiserver/pkg/storage/cacher/metrics"
	"k8s.io/klog/v2"

	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
)

// Upstream's apiserver_watch_events_dispatch_duration_seconds observes
// five stages per delivery. Through upstream's histogram vec that is five
// Observe calls a delivery, which cost the storage fan-out its latency lead
// over upstream's cache (docs/performance.md): the dispatcher hands an
// event to every watcher in turn, so each nanosecond per delivery is paid
// a thousand times in a row. So the cache keeps the same histogram (upstream's name,
// help, labels and buckets, read from its vec) in counters of its own, to
// which the dispatcher adds all the deliveries of an event a client took at
// once in one step per stage (they share every point), and exports them as
// a collector beside upstream's vec. upstream's has a child only for a
// resource upstream's cache serves; where both caches served one resource in
// this process (tests switch caches in one process), upstream's series is
// exported and the cache's left out, as the registry refuses one series
// twice.

// The stages, as upstream's dispatchStages defines them.
const (
	StageStorageToCache = iota
	StageCacherQueue
	StageWatcherQueue
	StageWatcherToClient
	StageTotal
	numStages
)

// StageLabels are the dispatch stages' label values, in stage order.
var StageLabels = [numStages]string{"storage_to_cache", "cacher_queue_latency", "watcher_queue_latency", "watcher_to_client_handler", "total"}

// stageHistogram is one stage of one resource: counts per bucket (the last
// is +Inf) and the sum in nanoseconds, each added atomically.
type stageHistogram struct {
	Counts   []atomic.Uint64
	SumNanos atomic.Int64
}

// ResourceStages is the histogram of one resource, shared by every cache
// of it in the process, as upstream's vec child is.
type ResourceStages struct {
	gr schema.GroupResource
	// bounds are the buckets' upper bounds in nanoseconds.
	bounds []int64
	Stages [numStages]stageHistogram
}

// NewResourceStages is gr's dispatch-stage counters over bounds (ns).
func NewResourceStages(gr schema.GroupResource, bounds []int64) *ResourceStages {
	r := &ResourceStages{gr: gr, bounds: bounds}
	for i := range r.Stages {
		r.Stages[i].Counts = make([]atomic.Uint64, len(bounds)+1)
	}
	return r
}

// Add counts n deliveries of d in stage.
func (r *ResourceStages) Add(stage int, d time.Duration, n uint64) {
	if d < 0 {
		d = 0
	}
	b, _ := slices.BinarySearch(r.bounds, int64(d))
	h := &r.Stages[stage]
	h.Counts[b].Add(n)
	h.SumNanos.Add(int64(d) * int64(n))
}

// Observe adds n deliveries of an event that passed t, queued for each
// watcher at queued, dequeued at dequeued and sent at sent (UnixNano).
func (r *ResourceStages) Observe(t objects.EventTimes, queued, dequeued, sent int64, n uint64) {
	if t.Decoded != 0 {
		r.Add(StageStorageToCache, time.Duration(t.Received-t.Decoded), n)
		r.Add(StageTotal, time.Duration(sent-t.Decoded), n)
	}
	r.Add(StageCacherQueue, time.Duration(t.Dispatched-t.Received), n)
	r.Add(StageWatcherQueue, time.Duration(dequeued-queued), n)
	r.Add(StageWatcherToClient, time.Duration(sent-dequeued), n)
}

// dispatchStagesCollector exports every resource's stages.
type dispatchStagesCollector struct {
	// desc and bounds are upstream's vec's, set by register.
	desc   *prometheus.Desc
	bounds []float64

	mu        sync.Mutex
	resources map[schema.GroupResource]*ResourceStages
}

// DispatchStages is the process's collector of every resource's dispatch
// stages, registered once (registerMetrics).
var DispatchStages = &dispatchStagesCollector{resources: map[schema.GroupResource]*ResourceStages{}}

// register takes upstream's vec's name, help and buckets (after
// upstream.Register, which annotates the help with the stability level) and
// returns the collector to register, or nil when the vec is hidden or
// disabled, as then upstream's cache exports nothing either.
func (c *dispatchStagesCollector) register() prometheus.Collector {
	vec := upstream.DispatchStageDuration
	if !vec.IsCreated() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.desc = prometheus.NewDesc(vec.FQName(), vec.Help, []string{"group", "resource", "stage"}, nil)
	c.bounds = slices.Clone(vec.Buckets)
	return c
}

// ForResource is gr's histogram, made on first use.
func (c *dispatchStagesCollector) ForResource(gr schema.GroupResource) *ResourceStages {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.resources[gr]; ok {
		return r
	}
	buckets := c.bounds
	if buckets == nil { // not registered (unit tests): upstream's buckets
		buckets = upstream.DispatchStageDuration.Buckets
	}
	bounds := make([]int64, len(buckets))
	for i, b := range buckets {
		bounds[i] = int64(math.Round(b * float64(time.Second)))
	}
	r := NewResourceStages(gr, bounds)
	c.resources[gr] = r
	return r
}

// Describe sends nothing, which makes the collector unchecked: upstream's
// vec is registered under the same name, and the registry would refuse a
// second descriptor of it.
func (c *dispatchStagesCollector) Describe(chan<- *prometheus.Desc) {}

func (c *dispatchStagesCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	desc, bounds := c.desc, c.bounds
	resources := make([]*ResourceStages, 0, len(c.resources))
	for _, r := range c.resources {
		resources = append(resources, r)
	}
	c.mu.Unlock()
	if desc == nil {
		return
	}
	theirs := upstreamSeries()
	for _, r := range resources {
		for i := range r.Stages {
			if theirs[seriesKey{r.gr.Group, r.gr.Resource, StageLabels[i]}] {
				continue
			}
			m, err := r.Stages[i].metric(desc, bounds, r.gr, StageLabels[i])
			if err != nil {
				klog.ErrorS(err, "Could not export a dispatch stage", "resource", r.gr.String(), "stage", StageLabels[i])
				continue
			}
			ch <- m
		}
	}
}

// metric is the stage as a cumulative histogram (from the cache's start,
// as upstream's vec has a child for every stage from its cache's start).
func (h *stageHistogram) metric(desc *prometheus.Desc, bounds []float64, gr schema.GroupResource, stage string) (prometheus.Metric, error) {
	buckets := make(map[float64]uint64, len(bounds))
	var count uint64
	for i := range h.Counts {
		count += h.Counts[i].Load()
		if i < len(bounds) {
			buckets[bounds[i]] = count
		}
	}
	sum := time.Duration(h.SumNanos.Load()).Seconds()
	return prometheus.NewConstHistogram(desc, count, sum, buckets, gr.Group, gr.Resource, stage)
}

type seriesKey struct{ group, resource, stage string }

// upstreamSeries is the series upstream's vec has.
func upstreamSeries() map[seriesKey]bool {
	ch := make(chan prometheus.Metric, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(ch)
		upstream.DispatchStageDuration.Collect(ch)
	}()
	series := map[seriesKey]bool{}
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			continue
		}
		var k seriesKey
		for _, l := range pb.GetLabel() {
			switch l.GetName() {
			case "group":
				k.group = l.GetValue()
			case "resource":
				k.resource = l.GetValue()
			case "stage":
				k.stage = l.GetValue()
			}
		}
		series[k] = true
	}
	<-done
	return series
}

// Count is what a stage has observed: how many, and their sum.
func (r *ResourceStages) Count(stage int) (uint64, time.Duration) {
	var n uint64
	for i := range r.Stages[stage].Counts {
		n += r.Stages[stage].Counts[i].Load()
	}
	return n, time.Duration(r.Stages[stage].SumNanos.Load())
}
