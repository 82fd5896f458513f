package cacher

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

// BenchmarkStateApply is the apply path alone (store, ordered index,
// history, snapshots) for updates of random objects at 100 writes a second
// on a fake clock, with snapshots on and no list or watch reading the
// state: the cache's own cost per write that the exact-key bench measures
// over the floor, without etcd, decoding or dispatch (op = one event).
func BenchmarkStateApply(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("objects=%d", n), func(b *testing.B) {
			now := time.Unix(1_700_000_000, 0)
			s := newCacheState("/pods/", nil, 75*time.Second, 100_000, true, newResourceMetrics(schema.GroupResource{Resource: "pods"}), now)
			held := make([]*object, n)
			list := make([]any, n)
			for i := range held {
				pod := newTestPod(podName(i), 100, nil, "")
				held[i] = &object{key: "/pods/" + testNamespace + "/" + pod.Name, obj: pod}
				list[i] = held[i]
			}
			s.mu.Lock()
			if err := s.resetLocked(list, 100, now); err != nil {
				b.Fatal(err)
			}
			s.mu.Unlock()
			rv := uint64(100)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				rv++
				now = now.Add(10 * time.Millisecond)
				k := (i * 7919) % n
				prev := held[k]
				cur := &object{key: prev.key, obj: prev.obj}
				if _, err := s.apply(&event{typ: watch.Modified, rv: rv, cur: cur, prev: prev, recordedNanos: now.UnixNano()}, now); err != nil {
					b.Fatal(err)
				}
				held[k] = cur
			}
		})
	}
}
