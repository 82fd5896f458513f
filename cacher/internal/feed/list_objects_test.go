package feed

import (
	"errors"
	"reflect"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage"

	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
	"github.com/watchkeeper/watchkeeper/internal/fixtures"
)

// A compact list's items are held in several goroutines; each object is
// its item's, in the list's order, and one item that cannot be held fails
// the list.
func TestCompactListHoldsEveryItemInOrder(t *testing.T) {
	compactor, err := objects.NewCompactor(fixtures.CorePodCodec, storage.APIObjectVersioner{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	bad := errors.New("no key")
	f := &Feed{cfg: Config{
		KeyFunc: func(obj runtime.Object) (string, error) {
			if obj.(*corev1.Pod).Name == "" {
				return "", bad
			}
			return "/pods/ns/" + obj.(*corev1.Pod).Name, nil
		},
		GetAttrsFunc: fixtures.CorePodAttrs,
		Compactor:    compactor,
	}}
	items := make([]runtime.Object, 4*minObjectsPerShareWorker+3)
	for i := range items {
		pod := fixtures.RealisticPod("pod-"+strconv.Itoa(i), "ns", i, 0)
		pod.ResourceVersion = strconv.Itoa(i + 1)
		items[i] = pod
	}
	// Each reads back as the etcd3 store would decode it (which sets the
	// kind when the codec decodes to a versioned type).
	want := make([]runtime.Object, len(items))
	for i, item := range items {
		data, err := runtime.Encode(fixtures.CorePodCodec, item)
		if err != nil {
			t.Fatal(err)
		}
		if want[i], err = runtime.Decode(fixtures.CorePodCodec, data); err != nil {
			t.Fatal(err)
		}
	}
	objs, err := f.listedObjects(items)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range objs {
		got, err := o.Get()
		if err != nil || o.Key != "/pods/ns/pod-"+strconv.Itoa(i) || !reflect.DeepEqual(got, want[i]) {
			t.Fatalf("object %d: key %q, read back equal %v (%v); want item %d's: %s", i, o.Key, reflect.DeepEqual(got, want[i]), err, i, cmp.Diff(want[i], got))
		}
	}

	items[len(items)/2].(*corev1.Pod).Name = ""
	if _, err := f.listedObjects(items); !errors.Is(err, bad) {
		t.Errorf("a list with an item that has no key: %v, want its error", err)
	}
}
