package storagebench

import (
	"math"
	"testing"
)

// Stacks as the heap profiles of both caches have them (innermost first,
// the frames that matter), and the holder each is counted to.
func TestHolderOf(t *testing.T) {
	const (
		btree = "k8s.io/utils/third_party/forked/golang/btree."
		wk    = "github.com/watchkeeper/watchkeeper/cacher."
		wkst  = "github.com/watchkeeper/watchkeeper/cacher/internal/state."
		up    = "k8s.io/apiserver/pkg/storage/cacher."
		store = "k8s.io/apiserver/pkg/storage/cacher/store."
		// upstream applies events under client-go's reflector
		reflector = "k8s.io/client-go/tools/cache.handleWatch"
	)
	decode := []string{"k8s.io/api/core/v1.(*PodSpec).Unmarshal", "k8s.io/api/core/v1.(*Pod).Unmarshal",
		"k8s.io/apimachinery/pkg/runtime/serializer/protobuf.unmarshalToObject", "k8s.io/apimachinery/pkg/runtime/serializer/protobuf.(*Serializer).Decode"}
	with := func(inner []string, outer ...string) []string {
		return append(append([]string(nil), inner...), outer...)
	}
	for _, tc := range []struct {
		name  string
		stack []string
		want  string
	}{
		{"watchkeeper's list decoded", with(decode, "k8s.io/apiserver/pkg/storage/etcd3.(*store).GetList", wk+"(*Cacher).listStorage", wk+"(*Cacher).list"), HolderDecoded},
		{"a watch event decoded", with(decode, "k8s.io/apiserver/pkg/storage/etcd3.decodeObj", "k8s.io/apiserver/pkg/storage/etcd3.(*watchChan).transform"), HolderDecoded},
		{"a list's items array", []string{"reflect.growslice", "reflect.Value.grow", "reflect.Append", "k8s.io/apiserver/pkg/storage/etcd3.(*store).appendChunk", wk + "(*Cacher).list"}, HolderDecoded},
		{"a watch event's new object", []string{"reflect.unsafe_New", "reflect.New", "k8s.io/apimachinery/pkg/runtime.(*Scheme).New", "k8s.io/apimachinery/pkg/runtime.UseOrCreateObject"}, HolderDecoded},
		{"a list item copied out of its list", []string{"reflect.unsafe_New", "reflect.New", "k8s.io/apimachinery/pkg/api/meta.extractList", "k8s.io/apimachinery/pkg/api/meta.ExtractListWithAlloc", wk + "(*Cacher).list"}, HolderDecoded},
		{"a reflector's list decoded", with(decode, "k8s.io/apiserver/pkg/storage/etcd3.(*store).GetList", "k8s.io/client-go/tools/cache.(*Reflector).list"), HolderDecoded},
		{"the etcd3 storage's size estimate", []string{"k8s.io/apiserver/pkg/storage/etcd3.(*resourceSizeEstimator).updateKey", "k8s.io/apiserver/pkg/storage/etcd3.(*store).GetList"}, HolderOther},
		{"watchkeeper's attributes", []string{"github.com/watchkeeper/watchkeeper/internal/fixtures.CorePodAttrs", wk + "(*Cacher).newObject", wk + "(*Cacher).newEvent"}, HolderAttrs},
		{"upstream's attributes", []string{"github.com/watchkeeper/watchkeeper/internal/fixtures.PodAttrs", up + "(*watchCache).processEvent", reflector}, HolderAttrs},
		{"watchkeeper's entry", []string{wk + "(*Cacher).newObject", wk + "(*Cacher).newEvent", wk + "(*Cacher).apply"}, HolderKeyIndex},
		{"watchkeeper's key map", []string{"runtime.mapassign_faststr", "k8s.io/client-go/tools/cache.(*threadSafeMap).Update", "k8s.io/client-go/tools/cache.(*cache).Update", wk + "(*Cacher).apply"}, HolderKeyIndex},
		{"upstream's key", []string{"k8s.io/apiserver/pkg/storage.NamespaceKeyFunc", up + "(*watchCache).processEvent", reflector}, HolderKeyIndex},
		{"upstream's index", []string{store + "(*indexer).add", store + "(*threadedStoreIndexer).addOrUpdate", up + "(*watchCache).processEvent", reflector}, HolderKeyIndex},
		{"upstream's list entries", []string{up + "(*watchCache).Replace", "k8s.io/client-go/tools/cache.(*Reflector).watchList"}, HolderKeyIndex},
		{"watchkeeper's tree built", []string{btree + "(*FreeList[go.shape.*uint8]).newNode", btree + "(*BTree[go.shape.*uint8]).ReplaceOrInsert", wkst + "orderedObjects.set", wkst + "(*orderedObjects).reset", wk + "(*Cacher).list"}, HolderOrdered},
		{"upstream's tree grown", []string{btree + "(*items[go.shape.*uint8]).insertAt", btree + "(*node[go.shape.*uint8]).insert", store + "(*btreeStore).addOrUpdateElem", store + "(*WatchCacheStorage).UpdateStoreLocked", up + "(*watchCache).processEvent", reflector}, HolderOrdered},
		{"watchkeeper's copy on write", []string{btree + "(*FreeList[go.shape.*uint8]).newNode", btree + "(*node[go.shape.*uint8]).mutableFor", btree + "(*node[go.shape.*uint8]).mutableChild", wkst + "orderedObjects.set", wk + "(*Cacher).apply"}, treeCopies},
		{"upstream's copy on write", []string{btree + "(*node[go.shape.*uint8]).mutableFor", store + "(*btreeStore).addOrUpdateElem", store + "(*WatchCacheStorage).UpdateStoreLocked", up + "(*watchCache).processEvent", reflector}, treeCopies},
		{"upstream's clone", []string{btree + "(*BTree[go.shape.*uint8]).Clone", store + "(*btreeStore).Clone", store + "(*storeSnapshotter).Add"}, HolderSnapshots},
		{"upstream's snapshot records", []string{btree + "(*items[go.shape.struct { k8s.io/apiserver/pkg/storage/cacher/store.resourceVersion uint64; k8s.io/apiserver/pkg/storage/cacher/store.snapshot k8s.io/apiserver/pkg/storage/cacher/store.Snapshot }]).insertAt", btree + "(*BTree[go.shape.struct {}]).ReplaceOrInsert", store + "(*storeSnapshotter).Add"}, HolderSnapshots},
		{"watchkeeper's snapshot records", []string{wkst + "(*snapshots).add", wkst + "(*State).snapshotLocked"}, HolderSnapshots},
		{"watchkeeper's event", []string{wk + "(*Cacher).newEvent", wk + "(*Cacher).apply"}, HolderHistory},
		{"watchkeeper's ring", []string{wkst + "(*history).resize", wkst + "(*history).add", wk + "(*Cacher).apply"}, HolderHistory},
		{"upstream's event", []string{up + "(*watchCache).processEvent", up + "(*watchCache).Update", reflector}, HolderHistory},
		{"upstream's ring", []string{up + "(*watchCacheHistory).doCacheResizeLocked", up + "(*watchCache).processEvent", reflector}, HolderHistory},
		// Made under the etcd3 storage or beside a cache's tree, but the
		// process's: the memory scenario's test counted them as decoded
		// objects and as a tree when no cache ran (the CI run of 2026-12-05).
		{"the etcd3 storage's request metrics", []string{"github.com/prometheus/client_golang/prometheus.MakeLabelPairs", "github.com/prometheus/client_golang/prometheus.(*CounterVec).WithLabelValues",
			"github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus.(*reporter).PostCall", "google.golang.org/grpc.(*ClientConn).Invoke", "k8s.io/apiserver/pkg/storage/etcd3.(*store).GetList"}, HolderOther},
		{"protobuf's type info, made on a first message", []string{"google.golang.org/protobuf/internal/impl.fieldInfoForScalar", "google.golang.org/protobuf/internal/impl.(*MessageInfo).init",
			"google.golang.org/protobuf/proto.Size", "google.golang.org/grpc/encoding/proto.(*codecV2).Marshal", "k8s.io/apiserver/pkg/storage/etcd3.(*store).GetList"}, HolderOther},
		{"the etcd3 storage's compactor", []string{"k8s.io/apiserver/pkg/storage/etcd3.NewCompactor", "k8s.io/apiserver/pkg/storage/etcd3.StartCompactorPerEndpoint"}, HolderOther},
		{"the etcd3 storage's lease manager", []string{"k8s.io/apiserver/pkg/storage/etcd3.newLeaseManager", "k8s.io/apiserver/pkg/storage/etcd3.newDefaultLeaseManager", "k8s.io/apiserver/pkg/storage/etcd3.New"}, HolderOther},
		{"a type assertion's cache", []string{"runtime.buildTypeAssertCache", "runtime.typeAssert", "k8s.io/apimachinery/pkg/runtime/serializer/versioning.(*codec).Decode", "k8s.io/apiserver/pkg/storage/etcd3.(*store).GetList"}, HolderOther},
		{"the feature gates' record of a query", []string{"k8s.io/component-base/featuregate.(*featureGate).unsafeRecordQueried", "k8s.io/apiserver/pkg/storage.(*SelectionPredicate).Matches", "k8s.io/apiserver/pkg/storage/etcd3.(*store).processListItem"}, HolderOther},
		{"an etcd server's index in this process", []string{btree + "NewFreeList[...]", btree + "New[...]", "go.etcd.io/etcd/server/v3/storage/mvcc.newTreeIndex", "go.etcd.io/etcd/server/v3/embed.StartEtcd"}, HolderOther},
		{"the logger", []string{"go.uber.org/zap/zapcore.newCounters", "runtime.main"}, HolderOther},
	} {
		if got := holderOf(tc.stack); got != tc.want {
			t.Errorf("%s: holder %s, want %s", tc.name, got, tc.want)
		}
	}
}

// The in-use bytes of a sample scale as pprof scales them: large objects
// are always sampled, small ones stand for many.
func TestScaledInUse(t *testing.T) {
	const rate = 64 << 10
	for _, tc := range []struct {
		count, size int64
		want        float64
	}{
		{0, 0, 0},
		{1, 1 << 30, 1 << 30}, // far above the rate: as is
		{1000, 64_000, 64_000 / (1 - math.Exp(-64.0/rate))}, // 64-byte objects: about 1024x
		{10, 10 * rate, 10 * rate / (1 - math.Exp(-1))},
	} {
		got := scaledInUse(tc.count, tc.size, rate)
		if math.Abs(got-tc.want) > 1e-6*math.Max(1, tc.want) {
			t.Errorf("scaledInUse(%d, %d) = %v, want %v", tc.count, tc.size, got, tc.want)
		}
	}
	if got := scaledInUse(3, 300, 1); got != 300 {
		t.Errorf("at rate 1 (every allocation sampled) = %v, want 300", got)
	}
}

// The B-tree's bytes split into the current tree's (its bytes after the
// fill) and the snapshots' (the rest), however the stacks that allocated
// them split them.
func TestSplitTree(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		filled, updated        map[string]float64
		wantOrdered, wantSnaps float64
	}{
		{"every original kept by a clone, the copies in the current tree",
			map[string]float64{HolderOrdered: 100}, map[string]float64{HolderOrdered: 100, treeCopies: 300, HolderSnapshots: 10}, 100, 310},
		{"the originals collected, the current tree all copies",
			map[string]float64{HolderOrdered: 100}, map[string]float64{treeCopies: 100, HolderSnapshots: 5}, 100, 5},
		{"no clone written",
			map[string]float64{HolderOrdered: 100, HolderSnapshots: 1}, map[string]float64{HolderOrdered: 100, HolderSnapshots: 1}, 100, 1},
		{"no tree (no cache)", map[string]float64{HolderOther: 50}, map[string]float64{HolderOther: 60}, 0, 0},
	} {
		got := splitTree(tc.filled, tc.updated)
		if got[HolderOrdered] != tc.wantOrdered || got[HolderSnapshots] != tc.wantSnaps {
			t.Errorf("%s: ordered %v snapshots %v, want %v and %v", tc.name, got[HolderOrdered], got[HolderSnapshots], tc.wantOrdered, tc.wantSnaps)
		}
		if _, ok := got[treeCopies]; ok {
			t.Errorf("%s: the copies are still a holder of their own", tc.name)
		}
		for h, b := range tc.updated {
			if h != HolderOrdered && h != HolderSnapshots && h != treeCopies && got[h] != b {
				t.Errorf("%s: %s = %v, want %v as it was", tc.name, h, got[h], b)
			}
		}
	}
}
