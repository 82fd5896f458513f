package storagebench

import "github.com/watchkeeper/watchkeeper/hack/bench/internal/result"

// Level is the result level of every figure of this package.
const Level = "storage"

// Which way a figure is good, for result.Result.Better.
const (
	lower  = "lower"
	higher = "higher"
)

// figures collects one run's results, all with the same scenario, decorator
// and params.
type figures struct {
	scenario, decorator string
	params              map[string]int
	out                 []result.Result
}

func newFigures(scenario, decorator string, params map[string]int) *figures {
	return &figures{scenario: scenario, decorator: decorator, params: params}
}

func (f *figures) add(metric string, value float64, unit, better string) {
	f.out = append(f.out, result.Result{
		Scenario: f.scenario, Level: Level, Decorator: f.decorator, Params: f.params,
		Metric: metric, Value: value, Unit: unit, Better: better,
	})
}
