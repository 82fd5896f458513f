package cacher

// shardBucketBits is how many top bits of a hash pick its bucket: 256
// buckets, so with N watchers each on 1/N of the hash space an event is
// matched against about N/256 + 1 of them rather than N (upstream hashes
// every event against every watcher).
const shardBucketBits = 8

// shardBuckets files the sharded watchers of one prefix and shard field by
// the buckets their ranges overlap. A watcher stands once in each bucket it
// overlaps, in no order; an event looks up one bucket, so it meets each
// watcher at most once, and the exact range check (shardFilter.contains)
// is left to the watcher's selection.
type shardBuckets struct {
	buckets  [1 << shardBucketBits][]*watcher
	watchers int
}

func bucketOf(h uint64) int { return int(h >> (64 - shardBucketBits)) }

// eachBucket calls fn with each bucket f's ranges overlap, once each, in
// order (the ranges are sorted by their start).
func (f *shardFilter) eachBucket(fn func(b int)) {
	last := -1
	for _, r := range f.ranges {
		end, ok := r.lastHash()
		if !ok {
			continue
		}
		for b := max(bucketOf(r.lo), last+1); b <= bucketOf(end); b++ {
			fn(b)
			last = b
		}
	}
}

func (s *shardBuckets) add(w *watcher) {
	w.shard.eachBucket(func(b int) { s.buckets[b] = append(s.buckets[b], w) })
	s.watchers++
}

func (s *shardBuckets) remove(w *watcher) {
	w.shard.eachBucket(func(b int) {
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
