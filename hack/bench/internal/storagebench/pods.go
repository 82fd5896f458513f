package storagebench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/client-go/tools/cache"

	"github.com/watchkeeper/watchkeeper/internal/fixtures"
)

const (
	resourcePrefix = "/pods/"
	benchNamespace = "bench"
	// writtenAtAnnotation carries an object's write wall time (UnixNano), so
	// each watcher measures write-to-receipt latency without shared state.
	writtenAtAnnotation = "bench.watchkeeper.io/written-at"
)

// The resource is example.Pod stored as protobuf (package fixtures), what
// the integration harness and upstream's cacher tests use; both decorators
// get the same codec.
var codec = fixtures.ProtoCodec

func podKey(obj runtime.Object) (string, error) { return storage.NamespaceKeyFunc(resourcePrefix, obj) }

// The trigger and indexer the real pods registry has, so both caches take
// their indexed dispatch paths as they would in a kube-apiserver.
func podIndexers() *cache.Indexers {
	return &cache.Indexers{fixtures.NodeNameIndex: fixtures.NodeNameIndexFunc}
}

func benchPod(name string, writtenAt time.Time) *example.Pod {
	pod := &example.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: benchNamespace,
			Labels:    map[string]string{"app": "bench"},
		},
		Spec: example.PodSpec{NodeName: "node-" + strconv.Itoa(len(name)%8)},
	}
	if !writtenAt.IsZero() {
		pod.Annotations = map[string]string{writtenAtAnnotation: strconv.FormatInt(writtenAt.UnixNano(), 10)}
	}
	return pod
}

func createPod(ctx context.Context, s storage.Interface, pod *example.Pod) error {
	key, err := podKey(pod)
	if err != nil {
		return err
	}
	return s.Create(ctx, key, pod, &example.Pod{}, 0)
}

// createPods writes n pods named prefix-<i> with a few concurrent writers,
// as a bulk load is faster than one at a time and its speed is not measured.
func createPods(ctx context.Context, s storage.Interface, prefix string, n int) error {
	return writePods(ctx, s, n, 8, func(i int) *example.Pod {
		return benchPod(fmt.Sprintf("%s-%d", prefix, i), time.Time{})
	})
}

// writePods creates pods 0..n-1 from writers concurrent writers, writer w
// taking pods w, w+writers, ...; pod(i) builds pod i just before it is
// written. It returns the first error, after which that writer stops.
func writePods(ctx context.Context, s storage.Interface, n, writers int, pod func(i int) *example.Pod) error {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for w := range writers {
		wg.Go(func() {
			for i := w; i < n; i += writers {
				if err := createPod(ctx, s, pod(i)); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

// openFilled opens the decorator's storage holding n pods named
// prefix-<i>, once a consistent list from its cache has them all; destroy
// releases the storage.
func openFilled(ctx context.Context, env Env, decorator, prefix string, n int) (s storage.Interface, destroy func(), err error) {
	s, destroy, err = openStorage(ctx, env, decorator)
	if err != nil {
		return nil, nil, err
	}
	if err := createPods(ctx, s, prefix, n); err != nil {
		destroy()
		return nil, nil, fmt.Errorf("creating %d objects: %w", n, err)
	}
	if err := waitForObjects(ctx, s, n); err != nil {
		destroy()
		return nil, nil, err
	}
	return s, destroy, nil
}

// waitForObjects waits until a consistent list from the cache holds n
// objects: the cache has seen every write before reads are timed.
func waitForObjects(ctx context.Context, s storage.Interface, n int) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		_, got, err := currentRV(ctx, s)
		if err == nil && got == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cache holds %d objects, want %d (last error: %v)", got, n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
