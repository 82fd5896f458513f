package integration

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"

	"github.com/watchkeeper/watchkeeper/cacher"
)

// TestBackfillReadsEtcdsPastStateOfTheModifiedObjects: a new cache (its
// apiserver restarted) serves a selector's watch resuming from before its
// list by reading etcd's events since then and, key by key at that RV,
// the objects they modify. The selector then sees p1 leave it, which only
// p1's state at that RV tells; p9 joining and p2 going are told by their
// events alone.
func TestBackfillReadsEtcdsPastStateOfTheModifiedObjects(t *testing.T) {
	t.Parallel() // its own etcd and caches
	testBackfill(t, 0)
}

// TestBackfillEndsOnEtcdsProgressWhenNoEventReachesTheList: the same with
// 2,500 revisions of another key written after the last pod's change, so
// that the new cache lists at an RV no pod event has: the backfill's etcd
// watch hears nothing at or past it and ends on etcd's progress alone.
func TestBackfillEndsOnEtcdsProgressWhenNoEventReachesTheList(t *testing.T) {
	t.Parallel() // its own etcd and caches
	testBackfill(t, 2500)
}

// testBackfill is the backfill tests' flow, with filler revisions of a key
// outside the cache's prefix written after the gap's last pod change.
func testBackfill(t *testing.T, filler int) {
	e := setup(t)
	ctx := context.Background()
	write := func(name, gen string) uint64 {
		t.Helper()
		out := &example.Pod{}
		err := e.raw.GuaranteedUpdate(ctx, bhPodKey("bf", name), out, true, nil,
			func(input runtime.Object, _ storage.ResponseMeta) (runtime.Object, *uint64, error) {
				p := input.(*example.Pod).DeepCopy()
				p.Namespace, p.Name, p.Labels = "bf", name, map[string]string{"gen": gen}
				return p, nil, nil
			}, nil)
		if err != nil {
			t.Fatalf("writing %s: %v", name, err)
		}
		return bhRvOf(t, out)
	}
	var resumeRV uint64
	for i := range 9 {
		resumeRV = write("p"+strconv.Itoa(i), "web")
	}

	// The first cache goes; etcd changes; a second, over a store of its own
	// as a new apiserver's, starts and lists.
	e.cacher.Stop()
	left := write("p1", "db")
	joined := write("p9", "web")
	gone := &example.Pod{}
	if err := e.raw.Delete(ctx, bhPodKey("bf", "p2"), gone, nil, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := bhRvOf(t, gone)
	fill(t, e, filler)
	c, err := cacher.New(podCacheConfig(newPodStore(t, e.client, protoCodec, transformer, "pods")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	readyCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.WaitReady(readyCtx); err != nil {
		t.Fatal(err)
	}

	web := storage.SelectionPredicate{
		Label: labels.SelectorFromSet(labels.Set{"gen": "web"}), Field: fields.Everything(), GetAttrs: podAttrs,
	}
	w, err := c.Watch(ctx, "/pods/", storage.ListOptions{ResourceVersion: strconv.FormatUint(resumeRV, 10), Recursive: true, Predicate: web})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for _, want := range []struct {
		typ  watch.EventType
		name string
		rv   uint64
	}{{watch.Deleted, "p1", left}, {watch.Added, "p9", joined}, {watch.Deleted, "p2", deleted}} {
		ev := bhNext(t, w, 10*time.Second)
		if ev.Type == watch.Error {
			t.Fatalf("resume from %d: %s", resumeRV, bhDescribe(t, ev.Event))
		}
		m, err := meta.Accessor(ev.Object)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type != want.typ || m.GetName() != want.name || bhRvOf(t, ev.Object) != want.rv {
			t.Fatalf("resume from %d: got %s, want %s %s@%d", resumeRV, bhDescribe(t, ev.Event), want.typ, want.name, want.rv)
		}
	}
}

// fill writes n revisions of one key outside every cache's prefix, eight
// writers at a time.
func fill(t *testing.T, e *env, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				if _, err := e.client.Put(context.Background(), "/filler", strconv.Itoa(i)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("writing filler revisions: %v", err)
	}
}
