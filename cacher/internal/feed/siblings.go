package feed

import (
	"hash/maphash"
	"maps"
	goruntime "runtime"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/watchkeeper/watchkeeper/cacher/internal/versions"
)

// siblings makes objects made from one template share the memory of what
// they have equal. A ReplicaSet's pods are its template with a name, a
// UID, a node and a status: decoded one by one from etcd, each holds its
// own copy of the spec, the labels and the managed fields, which is most
// of a pod's heap. Each object entering the cache (listed, or added)
// shares with the last cached object of its kin (versions.Share, the walk
// an update's new version takes beside its old one), so the template's
// parts are held once per kin, not once per object (docs/performance.md,
// memory per cached object).
//
// An object's kin is its controller (the owner reference marked
// controller), else its generateName in its namespace, else its namespace:
// nodes, or a namespace's config maps, are alike too, only less often.
// Cached objects are never written, so sharing is invisible to readers.
//
// Only the reflector's goroutine uses it. It holds one object per kin with
// a live object in the cache: a kin's entry goes with its last object.
type siblings struct {
	last map[string]runtime.Object
	// kins is len(last), for the cache's inspection on other goroutines.
	kins atomic.Int64
}

// kin is the key obj's siblings share.
func kin(obj runtime.Object) string {
	m, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	if ref := metav1.GetControllerOfNoCopy(m); ref != nil {
		return "c/" + string(ref.UID)
	}
	if g := m.GetGenerateName(); g != "" {
		return "g/" + m.GetNamespace() + "/" + g
	}
	return "n/" + m.GetNamespace()
}

// reset forgets every kin: the cache's objects are replaced by a list.
func (s *siblings) reset() {
	s.last = nil
	s.counted()
}

// added shares obj, about to enter the cache and seen by nobody yet, with
// the last object of its kin (versions.Share), and makes it that last. It
// runs before obj's labels and fields are taken, so they point at the
// shared parts too.
func (s *siblings) added(obj runtime.Object) {
	shareWithLast(s.table(), kin(obj), obj)
	s.counted()
}

// shareWithLast shares obj with last[k], its kin's last object so far, and
// makes obj that last.
func shareWithLast(last map[string]runtime.Object, k string, obj runtime.Object) {
	if sib := last[k]; sib != nil {
		versions.Share(obj, sib)
	}
	last[k] = obj
}

// table is last, made on first use.
func (s *siblings) table() map[string]runtime.Object {
	if s.last == nil {
		s.last = map[string]runtime.Object{}
	}
	return s.last
}

// counted publishes len(last) for the inspection.
func (s *siblings) counted() { s.kins.Store(int64(len(s.last))) }

// listed shares a list's objects, seen by nobody yet, as added would one by
// one in their order, in workers goroutines: each takes the kins that hash
// to it, so every kin's objects share in the list's order on one
// goroutine and no two goroutines touch one object. The walk is the start's
// cost of sharing (8.3 us a pod on one goroutine, BenchmarkSiblingsShareAList); a list is
// the one time many objects wait for it at once. It returns once all are
// shared, every kin's last recorded.
func (s *siblings) listed(objs []runtime.Object, workers int) {
	s.reset()
	workers = listWorkers(len(objs), workers)
	if workers == 1 {
		for _, obj := range objs {
			s.added(obj)
		}
		return
	}
	kins := make([]string, len(objs))
	owner := make([]uint8, len(objs))
	seed := maphash.MakeSeed()
	for i, obj := range objs {
		kins[i] = kin(obj)
		owner[i] = uint8(maphash.String(seed, kins[i]) % uint64(workers))
	}
	lasts := make([]map[string]runtime.Object, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			last := map[string]runtime.Object{}
			for i, obj := range objs {
				if int(owner[i]) == w {
					shareWithLast(last, kins[i], obj)
				}
			}
			lasts[w] = last
		})
	}
	wg.Wait()
	for _, last := range lasts {
		maps.Copy(s.table(), last)
	}
	s.counted()
}

// minObjectsPerShareWorker keeps small lists on the reflector's goroutine:
// below it a goroutine costs more than the walks it takes over.
const minObjectsPerShareWorker = 500

// maxShareWorkers bounds the goroutines one list shares its objects in.
const maxShareWorkers = 4

// listWorkers is how many goroutines work through a list of n objects
// (sharing siblings, or holding compact objects): at most limit, and none
// with fewer than minObjectsPerShareWorker objects.
func listWorkers(n, limit int) int { return max(1, min(limit, n/minObjectsPerShareWorker)) }

// listWorkerLimit is the limit a list's workers have: a core each, up to
// maxShareWorkers.
func listWorkerLimit() int { return min(goruntime.GOMAXPROCS(0), maxShareWorkers) }

// replaced follows an update of prev to cur (cur shares with prev
// already): cur stands for its kin, so that prev's memory can go once the
// history lets go of it.
func (s *siblings) replaced(prev, cur runtime.Object) {
	s.deleted(prev)
	s.table()[kin(cur)] = cur
	s.counted()
}

// deleted forgets prev if it stands for its kin.
func (s *siblings) deleted(prev runtime.Object) {
	k := kin(prev)
	if s.last[k] == prev {
		delete(s.last, k)
		s.counted()
	}
}
