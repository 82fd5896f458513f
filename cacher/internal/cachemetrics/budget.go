package cachemetrics

import (
	compbasemetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// The memory budget's series (--watch-cache-max-bytes): whether a resource
// is over it, the size it was measured at, and what became of the open
// watches when it went over.
var (
	overBudget = compbasemetrics.NewGaugeVec(&compbasemetrics.GaugeOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "over_budget",
		Help: "1 while the resource is over its memory budget (--watch-cache-max-bytes): its cache holds no objects and " +
			"the resource is served from etcd, reads and watches; 0 while it is cached.",
		StabilityLevel: compbasemetrics.ALPHA,
	}, []string{"group", "resource"})
	estimatedBytes = compbasemetrics.NewGaugeVec(&compbasemetrics.GaugeOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "estimated_bytes",
		Help: "The resource's size as the budget last measured it: its objects' serialized size in etcd (the store's " +
			"size estimate while cached; the object count in etcd times the last average size while over).",
		StabilityLevel: compbasemetrics.ALPHA,
	}, []string{"group", "resource"})
	handedOver = compbasemetrics.NewCounterVec(&compbasemetrics.CounterOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "watches_handed_to_storage_total",
		Help: "Open watches of a resource that went over its memory budget, by outcome: relayed (continued from an etcd " +
			"watch from the position each had reached, on the same client watch), ended (a WatchList still waiting for the " +
			"end of its initial events: ended after its client read what was queued, so it lists again).",
		StabilityLevel: compbasemetrics.ALPHA,
	}, []string{"group", "resource", "outcome"})
)

// Outcomes of watches_handed_to_storage_total.
const (
	HandedRelayed = "relayed"
	HandedEnded   = "ended"
)

// NotReadyOverBudget is not_ready_total's reason for a resource that went
// over its memory budget (it is served from etcd meanwhile).
const NotReadyOverBudget = "over_budget"

// Reads sent to etcd while the resource is over its budget.
var (
	GetOverBudget   = StorageRead{"get", NotReadyOverBudget}
	ListOverBudget  = StorageRead{"list", NotReadyOverBudget}
	WatchOverBudget = StorageRead{"watch", NotReadyOverBudget}
)

func registerBudgetMetrics() {
	for _, m := range []compbasemetrics.Registerable{overBudget, estimatedBytes, handedOver} {
		legacyregistry.MustRegister(m)
	}
}

// Budget is one resource's budget series.
type Budget struct {
	OverBudget     compbasemetrics.GaugeMetric
	EstimatedBytes compbasemetrics.GaugeMetric
	HandedOver     map[string]compbasemetrics.CounterMetric
}

func newBudget(g, r string) Budget {
	return Budget{
		OverBudget:     overBudget.WithLabelValues(g, r),
		EstimatedBytes: estimatedBytes.WithLabelValues(g, r),
		HandedOver: map[string]compbasemetrics.CounterMetric{
			HandedRelayed: handedOver.WithLabelValues(g, r, HandedRelayed),
			HandedEnded:   handedOver.WithLabelValues(g, r, HandedEnded),
		},
	}
}
