package cacher

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

// filledState is a cacheState listed with n pods at RV 100 (window and
// the clock's start as given), and update, which applies a MODIFIED of
// the i-th write's pod (a fixed stride over them) at the next RV.
type filledState struct {
	s    *cacheState
	held []*object
	rv   uint64
}

func newFilledState(tb testing.TB, n int, window time.Duration, now time.Time) *filledState {
	s := newCacheState("/pods/", nil, window, 100_000, true, newResourceMetrics(schema.GroupResource{Resource: "pods"}), now)
	f := &filledState{s: s, held: make([]*object, n), rv: 100}
	list := make([]any, n)
	for i := range f.held {
		pod := newTestPod(podName(i), 100, nil, "")
		f.held[i] = &object{key: "/pods/" + testNamespace + "/" + pod.Name, obj: pod}
		list[i] = f.held[i]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.resetLocked(list, 100, now); err != nil {
		tb.Fatal(err)
	}
	return f
}

func (f *filledState) update(tb testing.TB, i int, now time.Time) {
	f.rv++
	k := (i * 7919) % len(f.held)
	prev := f.held[k]
	cur := &object{key: prev.key, obj: prev.obj}
	if _, err := f.s.apply(&event{typ: watch.Modified, rv: f.rv, cur: cur, prev: prev, recordedNanos: now.UnixNano()}, now); err != nil {
		tb.Fatal(err)
	}
	f.held[k] = cur
}

// BenchmarkStateApply is the apply path alone (store, ordered index,
// history, snapshots) for updates of random objects at 100 writes a second
// on a fake clock, with snapshots on and no list or watch reading the
// state: the cache's own cost per write that the exact-key bench measures
// over the floor, without etcd, decoding or dispatch (op = one event).
func BenchmarkStateApply(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("objects=%d", n), func(b *testing.B) {
			now := time.Unix(1_700_000_000, 0)
			f := newFilledState(b, n, 75*time.Second, now)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				now = now.Add(10 * time.Millisecond)
				f.update(b, i, now)
			}
		})
	}
}
