package main

import (
	"maps"
	"strings"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
)

// Params a paired run's results carry: which pair they come from (in
// results.jsonl), and once merged, how many pairs the median is of.
const (
	paramPair  = "pair"
	paramPairs = "pairs"
)

// tagPair marks the results of a run that is one of several pairs with its
// pair, so they stay apart in results.jsonl and medianOfPairs can merge them.
func tagPair(results []result.Result, r runSpec) {
	if r.Pairs <= 1 {
		return
	}
	for i := range results {
		params := maps.Clone(results[i].Params)
		if params == nil {
			params = map[string]int{}
		}
		params[paramPair] = r.Pair + 1
		results[i].Params = params
	}
}

// medianOfPairs merges the results of the pairs of one size: each figure
// becomes the median of its values, one per pair a run printed it, with the
// number of them in its params. Other results pass unchanged, and the order
// is kept (a merged figure stands where its first value stood).
func medianOfPairs(results []result.Result) []result.Result {
	var out []result.Result
	at := map[string]int{}
	values := map[string][]float64{}
	for _, r := range results {
		if _, ok := r.Params[paramPair]; !ok {
			out = append(out, r)
			continue
		}
		params := maps.Clone(r.Params)
		delete(params, paramPair)
		k := figureKey(r, params)
		if _, seen := at[k]; !seen {
			at[k] = len(out)
			merged := r
			merged.Params = params
			out = append(out, merged)
		}
		values[k] = append(values[k], r.Value)
	}
	for k, i := range at {
		vs := values[k]
		out[i].Value = result.Median(vs)
		out[i].Params[paramPairs] = len(vs)
	}
	return out
}

// figureKey names one figure of one size with one decorator.
func figureKey(r result.Result, params map[string]int) string {
	return strings.Join([]string{r.Scenario, r.Level, r.Decorator, formatParams(params), r.Metric}, "|")
}
