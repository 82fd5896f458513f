package cacher

// A watch that starts in etcd's past catches up in passes of etcd's
// watchable store: each pass reads every revision of every key from the
// watch's position to the present, sends the watch the events of at most
// 1,000 of those revisions (watchBatchMaxRevs) and waits at least 100ms
// before the next. One watch from a kubelet's RV a minute back at 1,000
// nodes (25,000 revisions, some 10,000 of them pods') thus took a pass per
// 1,000 pod events of 2-3s each on two busy cores, and the pods' backfill
// read 3,000 of its events in its 10s. Watches from several points of the
// gap are caught up by the same pass, each with its own 1,000 revisions.
const (
	// backfillSegmentRevs: a segment spans at least this many revisions,
	// so that a gap of a few seconds takes one watch.
	backfillSegmentRevs = 2000
	// maxBackfillSegments bounds the watches (and the events a pass sends
	// past their segments' ends) of one backfill.
	maxBackfillSegments = 16
)

// backfillSegments splits (from, to] into segments (b[i], b[i+1]] of
// about equal span, each read by a watch of its own: b[0] = from, the last
// is to.
func backfillSegments(from, to uint64) []uint64 {
	span := to - from
	n := min(max((span+backfillSegmentRevs-1)/backfillSegmentRevs, 1), maxBackfillSegments)
	bounds := make([]uint64, n+1)
	for i := range bounds {
		bounds[i] = from + span/n*uint64(i) + span%n*uint64(i)/n
	}
	return bounds
}
