// Package result is the one record every benchmark scenario emits: a JSON
// line per measured figure, so runs can be compared and tabulated by tools.
package result

import "slices"

// Result is one measured figure of one scenario run with one decorator.
type Result struct {
	// Scenario is idle, bookmarks, fanout, list or watchlist.
	Scenario string `json:"scenario"`
	// Level is storage (storage.Interface over etcd) or http (the sample
	// apiserver over HTTP).
	Level string `json:"level"`
	// Decorator is watchkeeper or upstream (or none for a baseline).
	Decorator string `json:"decorator"`
	// Params are the scenario's sizes, e.g. {"watchers": 1000, "events": 1000}.
	Params map[string]int `json:"params"`
	// Metric names the figure, e.g. heap_stack_bytes_per_watcher.
	Metric string  `json:"metric"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	// Better is Lower or Higher: which way a ratio is good.
	Better string `json:"better"`
}

// Which way a figure is good, for Result.Better.
const (
	Lower  = "lower"
	Higher = "higher"
)

// Median is the middle of xs (the mean of the two middles for an even
// count), or 0 for none; xs is left as it was.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}
