package cacher

// DropHistoryThrough evicts the watch history's events at or below rv, as
// though they had been evicted for room, so a watch from before rv gets
// 410. No server path calls it: an etcd compaction does not cut the
// history (state.State.ForgetCompacted says why). It is for the storage
// conformance suite, whose compaction tests (RunTestWatchFromZero) want a
// 410 for a watch from before a compaction; upstream's own run of that
// suite trims its cache's buffer by hand the same way (compactWatch in
// k8s.io/apiserver's pkg/storage/cacher tests).
func (c *Cacher) DropHistoryThrough(rv uint64) {
	c.state.DropHistoryThrough(rv)
}
