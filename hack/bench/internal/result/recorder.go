package result

import (
	"maps"
	"math"
)

// Recorder collects one scenario run's results: every figure it is given
// shares the run's scenario, level, decorator and params.
type Recorder struct {
	scenario, level, decorator string
	params                     map[string]int
	out                        []Result
}

// NewRecorder starts the results of one run.
func NewRecorder(scenario, level, decorator string, params map[string]int) *Recorder {
	return &Recorder{scenario: scenario, level: level, decorator: decorator, params: params}
}

// Add records one figure. A ratio with nothing to divide by (CPU per
// bookmark when none came) is left out rather than reported as NaN or
// +Inf, which JSON cannot carry and a table would misread.
func (r *Recorder) Add(metric string, value float64, unit, better string) {
	if math.IsNaN(value) || math.IsInf(value, 0) {
		return
	}
	r.out = append(r.out, Result{
		Scenario:  r.scenario,
		Level:     r.level,
		Decorator: r.decorator,
		Params:    maps.Clone(r.params),
		Metric:    metric,
		Value:     value,
		Unit:      unit,
		Better:    better,
	})
}

// Results are the figures added so far, in the order they were added.
func (r *Recorder) Results() []Result { return r.out }
