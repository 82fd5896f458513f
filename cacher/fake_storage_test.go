package cacher

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"

	"github.com/watchkeeper/watchkeeper/internal/fixtures"
)

// waitFor is the real-time bound for waiting on goroutines (never for
// asserting timing): generous, so a loaded CI machine does not flake.
const waitFor = 5 * time.Second

// fakeStorage is an in-memory storage.Interface for the cacher's tests: a
// settable list result, storage watches the test drives by hand, and counters
// for the calls the cacher makes. Writes are not supported: the cacher only
// passes them through.
type fakeStorage struct {
	mu sync.Mutex

	listItems    []example.Pod
	listRV       uint64
	listFailures int // GetList fails this many more times
	listCalls    int
	// listKeys are the keys GetList read, in order; a single object's
	// (not recursive) ends without a slash.
	listKeys []string

	// keyGate, when set, holds every single-key read until it is closed;
	// heldKeyReads are the contexts of the reads it held.
	keyGate      chan struct{}
	heldKeyReads []context.Context

	currentRV     uint64
	unreachable   bool // GetCurrentResourceVersion fails, as with etcd down
	compactRV     int64
	progressCalls int
	sizeKeys      storage.KeysFunc

	watches   []*fakeWatch
	watchOpts []storage.ListOptions
	// watchMD and progressMD are the gRPC metadata each watch and progress
	// request carried: etcd picks the stream by it.
	watchMD, progressMD []metadata.MD
}

var _ storage.Interface = (*fakeStorage)(nil)

func newFakeStorage(rv uint64, pods ...*example.Pod) *fakeStorage {
	s := &fakeStorage{}
	s.setList(rv, pods...)
	return s
}

// setList sets what the next GetList returns, and the current RV with it.
func (s *fakeStorage) setList(rv uint64, pods ...*example.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listItems = s.listItems[:0]
	for _, p := range pods {
		s.listItems = append(s.listItems, *p.DeepCopy())
	}
	s.listRV = rv
	s.currentRV = max(s.currentRV, rv)
}

// failLists makes the next n GetList calls fail.
func (s *fakeStorage) failLists(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listFailures = n
}

func (s *fakeStorage) setCurrentRV(rv uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.currentRV = rv
}

func (s *fakeStorage) setCompactRevision(rv int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.compactRV = rv
}

func (s *fakeStorage) listCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listCalls
}

// readKeys are the keys GetList has read, in order.
func (s *fakeStorage) readKeys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.listKeys)
}

// held is the contexts of the single-key reads keyGate holds or held.
func (s *fakeStorage) held() []context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.heldKeyReads)
}

func (s *fakeStorage) progressCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.progressCalls
}

func (s *fakeStorage) watchCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.watches)
}

// waitWatch waits until the cacher has opened its n-th storage watch (n from
// 1) and returns it with the options it was opened with.
func (s *fakeStorage) waitWatch(t testing.TB, n int) (*fakeWatch, storage.ListOptions) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		s.mu.Lock()
		if len(s.watches) >= n {
			w, opts := s.watches[n-1], s.watchOpts[n-1]
			s.mu.Unlock()
			return w, opts
		}
		s.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("the cacher did not open storage watch #%d within %v (has %d)", n, waitFor, s.watchCount())
		}
		time.Sleep(time.Millisecond)
	}
}

func (s *fakeStorage) Versioner() storage.Versioner { return storage.APIObjectVersioner{} }

func (s *fakeStorage) GetList(ctx context.Context, key string, opts storage.ListOptions, listObj runtime.Object) error {
	if !opts.Recursive {
		s.mu.Lock()
		gate := s.keyGate
		if gate != nil {
			s.heldKeyReads = append(s.heldKeyReads, ctx)
		}
		s.mu.Unlock()
		if gate != nil {
			<-gate
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listCalls++
	s.listKeys = append(s.listKeys, key)
	if s.listFailures > 0 {
		s.listFailures--
		return storage.NewUnreachableError(key, 0)
	}
	// The fake holds one state: an exact read at any other RV is one etcd
	// has compacted away.
	if opts.ResourceVersionMatch == metav1.ResourceVersionMatchExact && opts.ResourceVersion != strconv.FormatUint(s.listRV, 10) {
		return storage.NewInvalidError(field.ErrorList{field.Invalid(field.NewPath("resourceVersion"), opts.ResourceVersion, "compacted")})
	}
	list, ok := listObj.(*example.PodList)
	if !ok {
		return fmt.Errorf("fake storage lists pods, got %T", listObj)
	}
	list.Items = make([]example.Pod, 0, len(s.listItems))
	for i := range s.listItems {
		if !opts.Recursive {
			if k, err := testPodKey(&s.listItems[i]); err != nil || k != key {
				continue
			}
		}
		list.Items = append(list.Items, *s.listItems[i].DeepCopy())
	}
	list.ResourceVersion = strconv.FormatUint(s.listRV, 10)
	return nil
}

func (s *fakeStorage) Watch(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := &fakeWatch{ch: make(chan watch.Event, 1000), stopped: make(chan struct{})}
	s.watches = append(s.watches, w)
	s.watchOpts = append(s.watchOpts, opts)
	md, _ := metadata.FromOutgoingContext(ctx)
	s.watchMD = append(s.watchMD, md)
	return w, nil
}

func (s *fakeStorage) RequestWatchProgress(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.progressCalls++
	md, _ := metadata.FromOutgoingContext(ctx)
	s.progressMD = append(s.progressMD, md)
	return nil
}

func (s *fakeStorage) GetCurrentResourceVersion(ctx context.Context) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unreachable {
		return 0, storage.NewUnreachableError("current revision", 0)
	}
	return s.currentRV, nil
}

func (s *fakeStorage) setUnreachable(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unreachable = down
}

func (s *fakeStorage) CompactRevision() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.compactRV
}

func (s *fakeStorage) EnableResourceSizeEstimation(f storage.KeysFunc) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sizeKeys = f
	return nil
}

func (s *fakeStorage) Get(ctx context.Context, key string, opts storage.GetOptions, objPtr runtime.Object) error {
	return fmt.Errorf("fake storage: Get not supported")
}

func (s *fakeStorage) Create(ctx context.Context, key string, obj, out runtime.Object, ttl uint64) error {
	return fmt.Errorf("fake storage: Create not supported")
}

func (s *fakeStorage) Delete(ctx context.Context, key string, out runtime.Object, preconditions *storage.Preconditions,
	validateDeletion storage.ValidateObjectFunc, cachedExistingObject runtime.Object, opts storage.DeleteOptions) error {
	return fmt.Errorf("fake storage: Delete not supported")
}

func (s *fakeStorage) GuaranteedUpdate(ctx context.Context, key string, destination runtime.Object, ignoreNotFound bool,
	preconditions *storage.Preconditions, tryUpdate storage.UpdateFunc, cachedExistingObject runtime.Object) error {
	return fmt.Errorf("fake storage: GuaranteedUpdate not supported")
}

func (s *fakeStorage) DeleteOnce(ctx context.Context, key string, origState *storage.ObjState, out runtime.Object) error {
	return fmt.Errorf("fake storage: DeleteOnce not supported")
}

func (s *fakeStorage) UpdateOnce(ctx context.Context, key string, origState *storage.ObjState, obj runtime.Object, ttl uint64,
	destination runtime.Object, ignoreNotFound bool) (*storage.ObjState, error) {
	return nil, fmt.Errorf("fake storage: UpdateOnce not supported")
}

func (s *fakeStorage) Stats(ctx context.Context) (storage.Stats, error) { return storage.Stats{}, nil }

func (s *fakeStorage) ReadinessCheck() error { return nil }

// fakeWatch is one storage watch. The test sends on it; the cacher reads it
// and stops it. closeStream ends it as etcd ending a stream would; it must
// only be called from the goroutine that sends.
type fakeWatch struct {
	ch       chan watch.Event
	stopOnce sync.Once
	stopped  chan struct{}
}

func (w *fakeWatch) ResultChan() <-chan watch.Event { return w.ch }

func (w *fakeWatch) Stop() { w.stopOnce.Do(func() { close(w.stopped) }) }

func (w *fakeWatch) isStopped() bool {
	select {
	case <-w.stopped:
		return true
	default:
		return false
	}
}

// send queues ev for the cacher; it fails the test if the cacher stopped
// this watch.
func (w *fakeWatch) send(t testing.TB, typ watch.EventType, obj runtime.Object) {
	t.Helper()
	select {
	case <-w.stopped:
		t.Fatalf("sending %s on a storage watch the cacher already stopped", typ)
	default:
	}
	select {
	case w.ch <- watch.Event{Type: typ, Object: obj}:
	case <-time.After(waitFor):
		t.Fatalf("the cacher did not read the storage watch within %v", waitFor)
	}
}

// sendBookmark sends a storage progress notification at rv.
func (w *fakeWatch) sendBookmark(t *testing.T, rv uint64) {
	t.Helper()
	obj := &example.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: strconv.FormatUint(rv, 10)}}
	w.send(t, watch.Bookmark, obj)
}

// sendError sends a watch error carrying status, as etcd3 does for a
// compacted revision.
func (w *fakeWatch) sendError(t *testing.T, status *metav1.Status) {
	t.Helper()
	w.send(t, watch.Error, status)
}

func (w *fakeWatch) closeStream() { close(w.ch) }

// Pods, keyed and described as the cacher sees them.

const testNamespace = "ns"

func newTestPod(name string, rv uint64, lbls map[string]string, node string) *example.Pod {
	return &example.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       testNamespace,
			Name:            name,
			ResourceVersion: strconv.FormatUint(rv, 10),
			Labels:          lbls,
		},
		Spec: example.PodSpec{NodeName: node},
	}
}

func testPodKey(obj runtime.Object) (string, error) { return storage.NamespaceKeyFunc("/pods/", obj) }

// testPodAttrs are the pods' attributes, as every storage-level test and
// benchmark describes them.
var testPodAttrs = fixtures.PodAttrs
