package feed

import (
	"reflect"
	goruntime "runtime"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
	"github.com/watchkeeper/watchkeeper/internal/aliasing"
	"github.com/watchkeeper/watchkeeper/internal/fixtures"
)

// objectOf is obj as the feed caches it, its attributes taken after it
// shared with its siblings.
func objectOf(t *testing.T, obj runtime.Object) *objects.Object {
	t.Helper()
	lbls, flds, err := fixtures.CorePodAttrs(obj)
	if err != nil {
		t.Fatal(err)
	}
	return objects.NewDecoded("/pods/ns/"+obj.(*corev1.Pod).Name, obj, lbls, flds)
}

// decodedRealisticPod is realistic pod i as the cache gets it: decoded
// from etcd's bytes on its own, sharing no memory with any other pod.
func decodedRealisticPod(t *testing.T, i int) *objects.Object {
	t.Helper()
	data, err := runtime.Encode(fixtures.CorePodCodec, fixtures.RealisticPod("pod-"+strconv.Itoa(i), "ns", i, 0))
	if err != nil {
		t.Fatal(err)
	}
	obj, err := runtime.Decode(fixtures.CorePodCodec, data)
	if err != nil {
		t.Fatal(err)
	}
	return objectOf(t, obj)
}

// A ReplicaSet's pods, entering the cache one after another or in one
// list shared in workers, hold what they have equal once: pod i+50 (the
// realistic pods' next of the same ReplicaSet) points its volumes, its
// annotations, its sidecar and the strings of its field set at pod i's
// memory, and every pod still reads as it was decoded. Pods of another
// ReplicaSet share nothing with them, though much of their shape is alike.
func TestSiblingsShareTheirTemplate(t *testing.T) {
	const n = 1600
	for _, how := range []string{"added", "listed in 3 workers"} {
		t.Run(how, func(t *testing.T) {
			var s siblings
			pods := make([]runtime.Object, n)
			for i := range n {
				pods[i] = decodedRealisticPod(t, i).Decoded()
				if how == "added" {
					s.added(pods[i])
				}
			}
			if how != "added" {
				s.listed(pods, 3)
			}
			held := make([]*objects.Object, n)
			for i, pod := range pods {
				held[i] = objectOf(t, pod)
			}
			checkSiblingsShared(t, held)
			if len(s.last) != 50 || s.kins.Load() != 50 {
				t.Errorf("%d kins kept (counted %d), want the 50 ReplicaSets", len(s.last), s.kins.Load())
			}
			for i := n - 50; i < n; i++ {
				if s.last[kin(pods[i])] != pods[i] {
					t.Fatalf("pod %d, its ReplicaSet's last, does not stand for it", i)
				}
			}
		})
	}
}

func checkSiblingsShared(t *testing.T, held []*objects.Object) {
	t.Helper()
	pod := func(i int) *corev1.Pod { return held[i].Decoded().(*corev1.Pod) }
	for i := range held {
		want := decodedRealisticPod(t, i)
		if !reflect.DeepEqual(held[i].Decoded(), want.Decoded()) || !reflect.DeepEqual(held[i].Labels, want.Labels) || !reflect.DeepEqual(held[i].Fields, want.Fields) {
			t.Fatalf("pod %d no longer reads as decoded once shared with its siblings", i)
		}
	}
	for _, i := range []int{1, 7, 121, 1001} {
		p, sib := pod(i+50), pod(i)
		if !aliasing.Slice(p.Spec.Volumes, sib.Spec.Volumes) {
			t.Errorf("pod %d holds volumes of its own, want pod %d's (same ReplicaSet)", i+50, i)
		}
		if !aliasing.Map(p.Annotations, sib.Annotations) {
			t.Errorf("pod %d holds annotations of its own, want pod %d's", i+50, i)
		}
		if !aliasing.String(p.Spec.Containers[1].Image, sib.Spec.Containers[1].Image) {
			t.Errorf("pod %d's sidecar holds an image name of its own, want pod %d's", i+50, i)
		}
		if !aliasing.String(held[i+50].Fields["spec.serviceAccountName"], held[i].Fields["spec.serviceAccountName"]) {
			t.Errorf("pod %d's field set holds strings of its own, want pod %d's where equal", i+50, i)
		}
		if other := pod(i + 1); aliasing.Slice(p.Spec.Volumes, other.Spec.Volumes) || aliasing.String(p.Spec.Tolerations[0].Key, other.Spec.Tolerations[0].Key) {
			t.Errorf("pod %d shares with pod %d, of another ReplicaSet", i+50, i+1)
		}
	}
}

// The last object of a kin is forgotten with it: the map holds one live
// object per kin, never a deleted one, and an update's new version stands
// for its kin in place of the old.
func TestSiblingsForgetTheDeletedAndTheReplaced(t *testing.T) {
	var s siblings
	a, b, c := decodedRealisticPod(t, 1).Decoded(), decodedRealisticPod(t, 51).Decoded(), decodedRealisticPod(t, 2).Decoded()
	s.added(a)
	s.added(b)
	s.added(c)
	if len(s.last) != 2 || s.last[kin(b)] != b || s.last[kin(c)] != c {
		t.Fatalf("after three adds of two kins: %d kins, want 2 standing for the last of each", len(s.last))
	}
	s.deleted(a)
	if s.last[kin(b)] != b {
		t.Error("deleting an object that is not its kin's last forgot the kin")
	}
	b2 := decodedRealisticPod(t, 51).Decoded()
	s.replaced(b, b2)
	if s.last[kin(b)] != b2 {
		t.Error("after an update the old version still stands for its kin")
	}
	s.deleted(b2)
	s.deleted(c)
	if len(s.last) != 0 {
		t.Errorf("every object deleted, %d kins kept, want none", len(s.last))
	}
}

// BenchmarkSiblingsShareAList is what sharing costs a list: 10k realistic
// pods, decoded before it starts (out of the CPU's caches, as a list's
// are), shared on one goroutine and in the workers a list uses.
func BenchmarkSiblingsShareAList(b *testing.B) {
	const n = 10_000
	encoded := make([][]byte, n)
	for i := range n {
		data, err := runtime.Encode(fixtures.CorePodCodec, fixtures.RealisticPod("pod-"+strconv.Itoa(i), "ns", i, 0))
		if err != nil {
			b.Fatal(err)
		}
		encoded[i] = data
	}
	for _, workers := range []int{1, min(goruntime.GOMAXPROCS(0), maxShareWorkers)} {
		b.Run(strconv.Itoa(workers)+"-workers", func(b *testing.B) {
			objs := make([]runtime.Object, n)
			for b.Loop() {
				b.StopTimer()
				for i, data := range encoded {
					obj, err := runtime.Decode(fixtures.CorePodCodec, data)
					if err != nil {
						b.Fatal(err)
					}
					objs[i] = obj
				}
				var s siblings
				b.StartTimer()
				s.listed(objs, workers)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n)/1000, "us/object")
		})
	}
}
