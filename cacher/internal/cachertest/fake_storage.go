package cachertest

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

// WaitFor is the real-time bound for waiting on goroutines (never for
// asserting timing): generous, so a loaded CI machine does not flake.
const WaitFor = 5 * time.Second

// FakeStorage is an in-memory storage.Interface for the cacher's tests: a
// settable list result, storage watches the test drives by hand, and counters
// for the calls the cacher makes. Writes are not supported: the cacher only
// passes them through.
type FakeStorage struct {
	Mu sync.Mutex

	listItems    []example.Pod
	listRV       uint64
	listFailures int // GetList fails this many more times
	listCalls    int
	// listKeys are the keys GetList read, in order; a single object's
	// (not recursive) ends without a slash.
	listKeys []string

	// KeyGate, when set, holds every single-key read until it is closed;
	// heldKeyReads are the contexts of the reads it held.
	KeyGate      chan struct{}
	heldKeyReads []context.Context

	currentRV     uint64
	unreachable   bool // GetCurrentResourceVersion fails, as with etcd down
	compactRV     int64
	progressCalls int
	sizeKeys      storage.KeysFunc

	watches   []*FakeWatch
	watchOpts []storage.ListOptions
	// WatchMD and progressMD are the gRPC metadata each watch and progress
	// request carried: etcd picks the stream by it.
	WatchMD, ProgressMD []metadata.MD
}

var _ storage.Interface = (*FakeStorage)(nil)

func NewFakeStorage(rv uint64, pods ...*example.Pod) *FakeStorage {
	s := &FakeStorage{}
	s.SetList(rv, pods...)
	return s
}

// SetList sets what the next GetList returns, and the current RV with it.
func (s *FakeStorage) SetList(rv uint64, pods ...*example.Pod) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	s.listItems = s.listItems[:0]
	for _, p := range pods {
		s.listItems = append(s.listItems, *p.DeepCopy())
	}
	s.listRV = rv
	s.currentRV = max(s.currentRV, rv)
}

// FailLists makes the next n GetList calls fail.
func (s *FakeStorage) FailLists(n int) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	s.listFailures = n
}

func (s *FakeStorage) SetCurrentRV(rv uint64) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	s.currentRV = rv
}

func (s *FakeStorage) SetCompactRevision(rv int64) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	s.compactRV = rv
}

func (s *FakeStorage) ListCount() int {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	return s.listCalls
}

// ReadKeys are the keys GetList has read, in order.
func (s *FakeStorage) ReadKeys() []string {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	return slices.Clone(s.listKeys)
}

// Held is the contexts of the single-key reads keyGate holds or held.
func (s *FakeStorage) Held() []context.Context {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	return slices.Clone(s.heldKeyReads)
}

func (s *FakeStorage) ProgressCount() int {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	return s.progressCalls
}

func (s *FakeStorage) WatchCount() int {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	return len(s.watches)
}

// WaitWatch waits until the cacher has opened its n-th storage watch (n from
// 1) and returns it with the options it was opened with.
func (s *FakeStorage) WaitWatch(t testing.TB, n int) (*FakeWatch, storage.ListOptions) {
	t.Helper()
	deadline := time.Now().Add(WaitFor)
	for {
		s.Mu.Lock()
		if len(s.watches) >= n {
			w, opts := s.watches[n-1], s.watchOpts[n-1]
			s.Mu.Unlock()
			return w, opts
		}
		s.Mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("the cacher did not open storage watch #%d within %v (has %d)", n, WaitFor, s.WatchCount())
		}
		time.Sleep(time.Millisecond)
	}
}

func (s *FakeStorage) Versioner() storage.Versioner { return storage.APIObjectVersioner{} }

func (s *FakeStorage) GetList(ctx context.Context, key string, opts storage.ListOptions, listObj runtime.Object) error {
	if !opts.Recursive {
		s.Mu.Lock()
		gate := s.KeyGate
		if gate != nil {
			s.heldKeyReads = append(s.heldKeyReads, ctx)
		}
		s.Mu.Unlock()
		if gate != nil {
			<-gate
		}
	}
	s.Mu.Lock()
	defer s.Mu.Unlock()
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
			if k, err := PodKey(&s.listItems[i]); err != nil || k != key {
				continue
			}
		}
		list.Items = append(list.Items, *s.listItems[i].DeepCopy())
	}
	list.ResourceVersion = strconv.FormatUint(s.listRV, 10)
	return nil
}

func (s *FakeStorage) Watch(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	w := &FakeWatch{Ch: make(chan watch.Event, 1000), stopped: make(chan struct{})}
	s.watches = append(s.watches, w)
	s.watchOpts = append(s.watchOpts, opts)
	md, _ := metadata.FromOutgoingContext(ctx)
	s.WatchMD = append(s.WatchMD, md)
	return w, nil
}

func (s *FakeStorage) RequestWatchProgress(ctx context.Context) error {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	s.progressCalls++
	md, _ := metadata.FromOutgoingContext(ctx)
	s.ProgressMD = append(s.ProgressMD, md)
	return nil
}

func (s *FakeStorage) GetCurrentResourceVersion(ctx context.Context) (uint64, error) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	if s.unreachable {
		return 0, storage.NewUnreachableError("current revision", 0)
	}
	return s.currentRV, nil
}

func (s *FakeStorage) SetUnreachable(down bool) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	s.unreachable = down
}

func (s *FakeStorage) CompactRevision() int64 {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	return s.compactRV
}

func (s *FakeStorage) EnableResourceSizeEstimation(f storage.KeysFunc) error {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	s.sizeKeys = f
	return nil
}

func (s *FakeStorage) Get(ctx context.Context, key string, opts storage.GetOptions, objPtr runtime.Object) error {
	return fmt.Errorf("fake storage: Get not supported")
}

func (s *FakeStorage) Create(ctx context.Context, key string, obj, out runtime.Object, ttl uint64) error {
	return fmt.Errorf("fake storage: Create not supported")
}

func (s *FakeStorage) Delete(ctx context.Context, key string, out runtime.Object, preconditions *storage.Preconditions,
	validateDeletion storage.ValidateObjectFunc, cachedExistingObject runtime.Object, opts storage.DeleteOptions) error {
	return fmt.Errorf("fake storage: Delete not supported")
}

func (s *FakeStorage) GuaranteedUpdate(ctx context.Context, key string, destination runtime.Object, ignoreNotFound bool,
	preconditions *storage.Preconditions, tryUpdate storage.UpdateFunc, cachedExistingObject runtime.Object) error {
	return fmt.Errorf("fake storage: GuaranteedUpdate not supported")
}

func (s *FakeStorage) DeleteOnce(ctx context.Context, key string, origState *storage.ObjState, out runtime.Object) error {
	return fmt.Errorf("fake storage: DeleteOnce not supported")
}

func (s *FakeStorage) UpdateOnce(ctx context.Context, key string, origState *storage.ObjState, obj runtime.Object, ttl uint64,
	destination runtime.Object, ignoreNotFound bool) (*storage.ObjState, error) {
	return nil, fmt.Errorf("fake storage: UpdateOnce not supported")
}

func (s *FakeStorage) Stats(ctx context.Context) (storage.Stats, error) { return storage.Stats{}, nil }

func (s *FakeStorage) ReadinessCheck() error { return nil }

// FakeWatch is one storage watch. The test sends on it; the cacher reads it
// and stops it. CloseStream ends it as etcd ending a stream would; it must
// only be called from the goroutine that sends.
type FakeWatch struct {
	Ch       chan watch.Event
	stopOnce sync.Once
	stopped  chan struct{}
}

func (w *FakeWatch) ResultChan() <-chan watch.Event { return w.Ch }

func (w *FakeWatch) Stop() { w.stopOnce.Do(func() { close(w.stopped) }) }

func (w *FakeWatch) IsStopped() bool {
	select {
	case <-w.stopped:
		return true
	default:
		return false
	}
}

// Send queues ev for the cacher; it fails the test if the cacher stopped
// this watch.
func (w *FakeWatch) Send(t testing.TB, typ watch.EventType, obj runtime.Object) {
	t.Helper()
	select {
	case <-w.stopped:
		t.Fatalf("sending %s on a storage watch the cacher already stopped", typ)
	default:
	}
	select {
	case w.Ch <- watch.Event{Type: typ, Object: obj}:
	case <-time.After(WaitFor):
		t.Fatalf("the cacher did not read the storage watch within %v", WaitFor)
	}
}

// SendBookmark sends a storage progress notification at rv.
func (w *FakeWatch) SendBookmark(t *testing.T, rv uint64) {
	t.Helper()
	obj := &example.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: strconv.FormatUint(rv, 10)}}
	w.Send(t, watch.Bookmark, obj)
}

// SendError sends a watch error carrying status, as etcd3 does for a
// compacted revision.
func (w *FakeWatch) SendError(t *testing.T, status *metav1.Status) {
	t.Helper()
	w.Send(t, watch.Error, status)
}

func (w *FakeWatch) CloseStream() { close(w.Ch) }

// Pods, keyed and described as the cacher sees them.

const Namespace = "ns"

func NewPod(name string, rv uint64, lbls map[string]string, node string) *example.Pod {
	return &example.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       Namespace,
			Name:            name,
			ResourceVersion: strconv.FormatUint(rv, 10),
			Labels:          lbls,
		},
		Spec: example.PodSpec{NodeName: node},
	}
}

func PodKey(obj runtime.Object) (string, error) { return storage.NamespaceKeyFunc("/pods/", obj) }

// PodAttrs are the pods' attributes, as every storage-level test and
// benchmark describes them.
var PodAttrs = fixtures.PodAttrs
