package httpbench

import (
	"maps"
	"math"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
)

const (
	lower  = "lower"
	higher = "higher"
)

// recorder builds one scenario run's results.
type recorder struct {
	scenario, decorator string
	params              map[string]int
	out                 []result.Result
}

func newRecorder(scenario, decorator string, params map[string]int) *recorder {
	return &recorder{scenario: scenario, decorator: decorator, params: params}
}

// add records one figure. A ratio with nothing to divide by (CPU per
// bookmark when none came) is left out rather than reported as NaN or
// +Inf, which JSON cannot carry and a table would misread.
func (r *recorder) add(metric string, value float64, unit, better string) {
	if math.IsNaN(value) || math.IsInf(value, 0) {
		return
	}
	r.out = append(r.out, result.Result{
		Scenario:  r.scenario,
		Level:     "http",
		Decorator: r.decorator,
		Params:    maps.Clone(r.params),
		Metric:    metric,
		Value:     value,
		Unit:      unit,
		Better:    better,
	})
}
