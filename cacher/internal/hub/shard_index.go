package hub

import "github.com/watchkeeper/watchkeeper/cacher/internal/objects"

// shardBuckets files the sharded watchers of one prefix and shard field by
// the buckets their ranges overlap. A watcher stands once in each bucket it
// overlaps, in no order; an event looks up one bucket, so it meets each
// watcher at most once, and the exact range check (objects.ShardFilter.Contains)
// is left to the watcher's selection.
type shardBuckets struct {
	buckets  [1 << objects.ShardBucketBits][]*Watcher
	watchers int
}

func (s *shardBuckets) add(w *Watcher) {
	w.Shard.EachBucket(func(b int) { s.buckets[b] = append(s.buckets[b], w) })
	s.watchers++
}

func (s *shardBuckets) remove(w *Watcher) {
	w.Shard.EachBucket(func(b int) {
		list := s.buckets[b]
		for i, x := range list {
			if x == w {
				last := len(list) - 1
				list[i] = list[last]
				list[last] = nil
				s.buckets[b] = list[:last]
				break
			}
		}
		if len(s.buckets[b]) == 0 {
			s.buckets[b] = nil
		}
	})
	s.watchers--
}

// shardKey is what a shardBuckets is filed under: the watchers' prefix and
// the field their shards hash.
type shardKey struct{ prefix, field string }
