package result

import (
	"math"
	"reflect"
	"testing"
)

func TestRecorder(t *testing.T) {
	params := map[string]int{"watchers": 10}
	r := NewRecorder("idle", "http", "watchkeeper", params)
	r.Add("open_seconds", 1.5, "s", Lower)
	r.Add("cpu_seconds_per_1k_bookmarks", math.Inf(1), "s", Lower) // nothing to divide by
	r.Add("nan", math.NaN(), "s", Lower)
	r.Add("bookmarks_delivered", 10, "bookmarks", Higher)
	params["watchers"] = 99 // the caller's map is not the results'

	want := []Result{
		{Scenario: "idle", Level: "http", Decorator: "watchkeeper", Params: map[string]int{"watchers": 10},
			Metric: "open_seconds", Value: 1.5, Unit: "s", Better: "lower"},
		{Scenario: "idle", Level: "http", Decorator: "watchkeeper", Params: map[string]int{"watchers": 10},
			Metric: "bookmarks_delivered", Value: 10, Unit: "bookmarks", Better: "higher"},
	}
	if got := r.Results(); !reflect.DeepEqual(got, want) {
		t.Errorf("Results() = %+v, want %+v", got, want)
	}
}
