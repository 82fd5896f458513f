package storagebench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/watchkeeper/watchkeeper/internal/etcdtest"
	"github.com/watchkeeper/watchkeeper/internal/fixtures"
)

// The memory scenario end to end against an etcd, for both caches and for
// no cache (None), with both kinds of object, at a small size: every figure
// is reported, the caches hold their objects (decoded, as a holder), the
// object sizes are the kind's, and the heap profile is written.
func TestMemoryAgainstEtcd(t *testing.T) {
	e := etcdtest.Start(t)
	const objects = 200
	// None first: a cache destroyed in this process may still be
	// collecting its last objects (upstream's, in the first runs of this
	// test), which None's figures would count. The bench runs each in a
	// process of its own.
	for _, decorator := range []string{None, Watchkeeper, Upstream} {
		for _, kind := range MemoryKinds {
			t.Run(decorator+"/"+kind, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				profile := filepath.Join(t.TempDir(), "heap.pprof")
				env := Env{EtcdEndpoint: e.Endpoints()[0], Prefix: "/memory-test/" + kind + "/" + decorator, HeapProfile: profile}
				before, err := e.Client().Get(ctx, "/memory-test")
				if err != nil {
					t.Fatal(err)
				}
				firstRev := before.Header.Revision + 1
				rs, err := Memory(ctx, env, decorator, objects, kind)
				if err != nil {
					t.Fatal(err)
				}
				got := map[string]float64{}
				for _, r := range rs {
					got[r.Metric] = r.Value
					if r.Params["objects"] != objects {
						t.Errorf("%s: params %v, want objects=%d", r.Metric, r.Params, objects)
					}
				}
				size := rs[0].Params["object_bytes"]
				if lo, hi := objectBytesRange(kind); size < lo || size > hi {
					t.Errorf("object_bytes = %d, want %d-%d", size, lo, hi)
				}
				for _, m := range []string{"start_to_ready_seconds", "heap_bytes_per_object_filled", "heap_bytes_per_object_updated",
					"fill_seconds", "update_seconds", "update_applied_seconds"} {
					if got[m] <= 0 {
						t.Errorf("%s = %v, want > 0", m, got[m])
					}
				}
				for _, h := range Holders {
					if _, ok := got[HolderMetric(h)]; !ok {
						t.Errorf("holder %s not reported", h)
					}
				}
				// A cache holds every object, decoded, twice after the
				// updates (the current one and the history's previous);
				// the raw storage holds none of them.
				decoded := got[HolderMetric(HolderDecoded)]
				if decorator != None && decoded < float64(size) {
					t.Errorf("decoded objects hold %.0f bytes per object, want at least the %d bytes of its encoding", decoded, size)
				}
				if decorator == None && decoded > float64(size) {
					t.Errorf("no cache, and decoded objects hold %.0f bytes per object", decoded)
				}
				if st, err := os.Stat(profile); err != nil || st.Size() == 0 {
					t.Errorf("heap profile: %v", err)
				}
				// The run compacted etcd behind it: its first write's
				// revision is gone.
				_, err = e.Client().Get(ctx, "/memory-test", clientv3.WithRev(firstRev))
				if err == nil || !strings.Contains(err.Error(), "required revision has been compacted") {
					t.Errorf("a read at revision %d after the run: %v, want etcd's compacted error", firstRev, err)
				}
			})
		}
	}
}

func objectBytesRange(kind string) (int, int) {
	switch kind {
	case RealisticPods:
		return fixtures.RealisticPodMinBytes, fixtures.RealisticPodMaxBytes
	case CustomResources:
		// The same content as JSON, field names and all: about twice.
		return 3 * fixtures.RealisticPodMinBytes / 2, 3 * fixtures.RealisticPodMaxBytes
	}
	return 100, 256
}
