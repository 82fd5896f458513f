package storagebench

import (
	"context"
	"os"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
	"github.com/watchkeeper/watchkeeper/internal/etcdtest"
)

// figures are a run's values by metric.
func figures(rs []result.Result) map[string]float64 {
	got := map[string]float64{}
	for _, r := range rs {
		got[r.Metric] = r.Value
	}
	return got
}

// The sharded scenario end to end against an etcd, for both caches, at a
// small size: every watcher gets exactly the objects of its shard, none
// from another's.
func TestShardedAgainstEtcd(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	e := etcdtest.Start(t)
	const watchers, events = 5, 200
	for _, decorator := range []string{Watchkeeper, Upstream} {
		t.Run(decorator, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			env := Env{EtcdEndpoint: e.Endpoints()[0], Prefix: "/sharded-test/" + decorator, Self: self}
			rs, err := Sharded(ctx, env, decorator, watchers, events)
			if err != nil {
				t.Fatal(err)
			}
			got := figures(rs)
			want := map[string]float64{"events_missing": 0, "events_wrong_shard": 0, "events_duplicate": 0,
				"watchers_exact": watchers, "watchers_closed": 0}
			for m, v := range want {
				if g, ok := got[m]; !ok || g != v {
					t.Errorf("%s = %v (reported: %v), want %v", m, g, ok, v)
				}
			}
			for _, m := range []string{"events_per_second", "latency_p99_ms", "cpu_seconds", "write_seconds"} {
				if got[m] <= 0 {
					t.Errorf("%s = %v, want > 0", m, got[m])
				}
			}
			if lo, hi := got["shard_events_min"], got["shard_events_max"]; lo < 1 || hi > events/2 {
				t.Errorf("shards of %v to %v events of %d over %d shards", lo, hi, events, watchers)
			}
		})
	}
}

// The prevkv scenario end to end against an etcd, for both caches, with the
// gate on and off: with previous values etcd ranges its store at least once
// for every update and every delete it sends the cache's watch, and the cache
// receives more bytes for them; without, it does not range for them.
func TestPrevKVAgainstEtcd(t *testing.T) {
	e := etcdtest.Start(t)
	const objects = 40
	for _, decorator := range []string{Watchkeeper, Upstream} {
		byGate := map[bool]map[string]float64{}
		for _, without := range []bool{true, false} {
			name := decorator + "/with-prevkv"
			if without {
				name = decorator + "/without-prevkv"
			}
			t.Run(name, func(t *testing.T) {
				featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.WatchFromStorageWithoutPrevKV, without)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				env := Env{EtcdEndpoint: e.Endpoints()[0], Prefix: "/prevkv-test/" + name}
				rs, err := PrevKV(ctx, env, decorator, objects)
				if err != nil {
					t.Fatal(err)
				}
				gate := 0
				if without {
					gate = 1
				}
				for _, r := range rs {
					if r.Params[ParamWithoutPrevKV] != gate || r.Params["objects"] != objects {
						t.Fatalf("%s: params %v, want %s=%d objects=%d", r.Metric, r.Params, ParamWithoutPrevKV, gate, objects)
					}
				}
				got := figures(rs)
				byGate[without] = got
				for _, m := range []string{"cache_received_bytes_create", "cache_received_bytes_update", "cache_received_bytes_delete", "etcd_grpc_sent_bytes", "object_bytes"} {
					if got[m] <= 0 {
						t.Errorf("%s = %v, want > 0", m, got[m])
					}
				}
				for _, phase := range []string{"update", "delete"} {
					ranges := got["etcd_mvcc_ranges_"+phase]
					if !without && ranges < objects {
						t.Errorf("with PrevKV, %d %ss cost etcd %v ranges, want at least one each", objects, phase, ranges)
					}
					if without && ranges >= objects {
						t.Errorf("without PrevKV, %d %ss cost etcd %v ranges, want fewer than one each", objects, phase, ranges)
					}
				}
			})
		}
		with, without := byGate[false], byGate[true]
		if with == nil || without == nil {
			continue
		}
		// An update with its previous value carries the object twice, a
		// delete with it the whole object rather than none.
		for _, phase := range []string{"update", "delete"} {
			m := "cache_received_bytes_" + phase
			if with[m] < without[m]+objects*with["object_bytes"]/2 {
				t.Errorf("%s: %s with PrevKV %v, without %v: want about an object more per event", decorator, m, with[m], without[m])
			}
		}
	}
}
