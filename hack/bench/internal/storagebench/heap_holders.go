package storagebench

import (
	"math"
	"runtime"
	"strings"
)

// The holders of a cache's heap the memory scenario names: what keeps each
// share of it alive, told apart by the stack that allocated it.
const (
	// HolderDecoded is the objects as decoded from etcd (protobuf), and
	// the arrays of the lists that hold them.
	HolderDecoded = "decoded_objects"
	// HolderAttrs is the labels and fields sets computed once per object
	// version for selectors (the resource's GetAttrs).
	HolderAttrs = "selector_attributes"
	// HolderKeyIndex is the map from key to cached entry, the indexers'
	// indexes, the entries (watchkeeper's object, upstream's store.Element
	// of a list) and the keys.
	HolderKeyIndex = "key_index"
	// HolderOrdered is the nodes of the B-tree that keeps the objects in
	// key order.
	HolderOrdered = "ordered_index"
	// HolderSnapshots is what past states hold beyond the current one:
	// the B-tree nodes the clones keep (splitTree), and the snapshots' own
	// records.
	HolderSnapshots = "snapshot_nodes"
	// HolderHistory is the events kept for watches to resume from and
	// their ring (upstream allocates the store.Element of an event beside
	// its watchCacheEvent, in the same function, and it is counted here).
	HolderHistory = "history_entries"
	// HolderOther is the rest: the process, its etcd clients, the storage.
	HolderOther = "other"
)

// treeCopies is a step to HolderOrdered and HolderSnapshots: the B-tree
// nodes a write copied because a clone shared them (splitTree).
const treeCopies = "tree_copies"

// Holders are the holders in the order the report lists them.
var Holders = []string{HolderDecoded, HolderAttrs, HolderKeyIndex, HolderOrdered, HolderSnapshots, HolderHistory, HolderOther}

// Function name prefixes of the stacks the rules read.
const (
	wkCacher = "github.com/watchkeeper/watchkeeper/cacher."
	wkState  = "github.com/watchkeeper/watchkeeper/cacher/internal/state."
	upCacher = "k8s.io/apiserver/pkg/storage/cacher."
	upStore  = "k8s.io/apiserver/pkg/storage/cacher/store."
	btreePkg = "k8s.io/utils/third_party/forked/golang/btree."
	etcd3Pkg = "k8s.io/apiserver/pkg/storage/etcd3."
)

// holderRules decide a stack's holder: the first rule with a frame that
// matches wins. The order matters where stacks nest: a list's decoding
// runs under the cache's (or the reflector's) list, and a B-tree write
// under the store's update.
var holderRules = []struct {
	holder string
	// any frame whose function has one of these as a substring...
	frames []string
	// ...and, if set, another frame that has one of these.
	alsoFrames []string
}{
	// The process's, not a cache's, whatever stack they were made under:
	// the etcd3 storage's setup and its per-key size estimate, the etcd
	// client's and gRPC's streams and metrics, the feature gates' record,
	// protobuf's, reflect's and the runtime's type caches, and an etcd
	// server run in this process (the tests'; its index is a B-tree of the
	// same package as the caches').
	{holder: HolderOther, frames: []string{
		etcd3Pkg + "(*resourceSizeEstimator)", etcd3Pkg + "New", etcd3Pkg + "newDefaultLeaseManager", etcd3Pkg + "StartCompactor",
		"k8s.io/apiserver/pkg/storage/feature.", "go.etcd.io/etcd/", "google.golang.org/grpc", "github.com/prometheus/",
		etcd3Pkg + "WithCorruptObj", "k8s.io/component-base/featuregate.",
		"google.golang.org/protobuf/internal/impl.(*MessageInfo).init", "reflect.(*rtype).ptrTo",
		"runtime.buildTypeAssertCache", "runtime.buildInterfaceSwitchCache",
	}},
	// A node copied on write, because a clone shares it: the copy goes in
	// the current tree, the original stays in the clone.
	{holder: treeCopies, frames: []string{btreePkg}, alsoFrames: []string{").mutableFor"}},
	// The clones' own headers, and the records of the snapshots (upstream
	// keeps them in a B-tree of its own).
	{holder: HolderSnapshots, frames: []string{btreePkg}, alsoFrames: []string{").Clone", "napshot"}},
	{holder: HolderSnapshots, frames: []string{wkState + "(*snapshots)", wkState + "orderedObjects.clone", upStore + "(*storeSnapshotter)"}},
	{holder: HolderOrdered, frames: []string{btreePkg}},
	{holder: HolderAttrs, frames: []string{"internal/fixtures.PodAttrs", "internal/fixtures.CorePodAttrs"}},
	{holder: HolderDecoded, frames: []string{"k8s.io/apimachinery/pkg/runtime/serializer/protobuf.", "k8s.io/apimachinery/pkg/runtime.Decode",
		"k8s.io/apimachinery/pkg/runtime.(*Scheme).New", etcd3Pkg,
		// Each item copied out of a list (ExtractListWithAlloc), so the cache
		// holds it and not the list's array: the decoded object's own struct.
		"k8s.io/apimachinery/pkg/api/meta.extractList"}},
	// client-go's indexer, not its reflector, under which upstream's
	// cache applies every event.
	{holder: HolderKeyIndex, frames: []string{wkCacher + "(*Cacher).newObject", wkState + "newStore",
		"k8s.io/client-go/tools/cache.(*cache)", "k8s.io/client-go/tools/cache.(*threadSafeMap)", "k8s.io/client-go/tools/cache.(*storeIndex)",
		upStore, upCacher + "(*watchCache).Replace", "k8s.io/apiserver/pkg/storage.NamespaceKeyFunc"}},
	{holder: HolderHistory, frames: []string{wkState + "(*history)", wkCacher + "(*Cacher).newEvent",
		upCacher + "(*watchCache).processEvent", upCacher + "(*watchCacheHistory)"}},
}

// holderOf is the holder of memory allocated by the stack fns (function
// names, innermost first).
func holderOf(fns []string) string {
	for _, r := range holderRules {
		if anyFrameHas(fns, r.frames) && (r.alsoFrames == nil || anyFrameHas(fns, r.alsoFrames)) {
			return r.holder
		}
	}
	return HolderOther
}

func anyFrameHas(fns, parts []string) bool {
	for _, fn := range fns {
		for _, p := range parts {
			if strings.Contains(fn, p) {
				return true
			}
		}
	}
	return false
}

// splitTree returns the holders after the updates with the B-tree's nodes
// (HolderOrdered and treeCopies, by the stack that allocated them) split
// into the current tree's and the snapshots'. An update replaces an item
// and leaves the tree's shape as it was, so the current tree has as many
// nodes as after the fill, when no clone had been written yet: the ordered
// index is the tree's bytes after the fill (at most its bytes now), and the
// snapshots hold the rest. (By stack alone, the current tree's copies would
// count as the snapshots' and the originals a snapshot keeps as the
// index's: the same total, split right only while every original lives.)
func splitTree(filled, updated map[string]float64) map[string]float64 {
	out := make(map[string]float64, len(updated))
	for h, b := range updated {
		if h != treeCopies {
			out[h] = b
		}
	}
	tree := updated[HolderOrdered] + updated[treeCopies]
	out[HolderOrdered] = min(filled[HolderOrdered]+filled[treeCopies], tree)
	out[HolderSnapshots] += tree - out[HolderOrdered]
	return out
}

// heapHolders is the live heap by holder, as of the last collection, from
// the runtime's heap profile (sampled at runtime.MemProfileRate, and
// scaled up as pprof does).
func heapHolders() map[string]float64 {
	var records []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, false)
	for {
		records = make([]runtime.MemProfileRecord, n+64)
		var ok bool
		if n, ok = runtime.MemProfile(records, false); ok {
			records = records[:n]
			break
		}
	}
	rate := int64(runtime.MemProfileRate)
	out := map[string]float64{}
	fns := make([]string, 0, 64)
	for _, r := range records {
		bytes := scaledInUse(r.InUseObjects(), r.InUseBytes(), rate)
		if bytes == 0 {
			continue
		}
		fns = fns[:0]
		frames := runtime.CallersFrames(r.Stack())
		for {
			f, more := frames.Next()
			fns = append(fns, f.Function)
			if !more {
				break
			}
		}
		out[holderOf(fns)] += bytes
	}
	return out
}

// scaledInUse is the bytes a sample of count objects of size bytes in all
// stands for, when one is sampled per rate bytes allocated on average: an
// object of s bytes is sampled with probability 1-exp(-s/rate).
func scaledInUse(count, size, rate int64) float64 {
	if count <= 0 || size <= 0 {
		return 0
	}
	if rate <= 1 {
		return float64(size)
	}
	avg := float64(size) / float64(count)
	return float64(size) / (1 - math.Exp(-avg/float64(rate)))
}
