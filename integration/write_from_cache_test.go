package integration

import (
	"context"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage"
	storagetesting "k8s.io/apiserver/pkg/storage/testing"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"

	"github.com/watchkeeper/watchkeeper/internal/etcdtest"
)

// txnRecorder is the etcd3 store with a record of the write paths the cache
// takes: whole GuaranteedUpdates, or single transactions and the revision
// each started from.
type txnRecorder struct {
	storage.Interface
	mu                sync.Mutex
	guaranteedUpdates int
	updateOnceRevs    []int64
}

func (r *txnRecorder) GuaranteedUpdate(ctx context.Context, key string, dest runtime.Object, ignoreNotFound bool,
	pre *storage.Preconditions, try storage.UpdateFunc, suggestion runtime.Object) error {
	r.mu.Lock()
	r.guaranteedUpdates++
	r.mu.Unlock()
	return r.Interface.GuaranteedUpdate(ctx, key, dest, ignoreNotFound, pre, try, suggestion)
}

func (r *txnRecorder) UpdateOnce(ctx context.Context, key string, orig *storage.ObjState, obj runtime.Object, ttl uint64,
	dest runtime.Object, ignoreNotFound bool) (*storage.ObjState, error) {
	r.mu.Lock()
	r.updateOnceRevs = append(r.updateOnceRevs, orig.Rev)
	r.mu.Unlock()
	return r.Interface.UpdateOnce(ctx, key, orig, obj, ttl, dest, ignoreNotFound)
}

// Under ConsistentGetFromCache a write starts from the cached object and,
// after losing to another write, retries from the cache once it holds that
// write, as one conditional transaction each: no etcd read for either. With
// the gate off, the whole update is the etcd3 store's, with the cached object
// as its hint.
func TestWritesFromTheCache(t *testing.T) {
	for _, fromCache := range []bool{true, false} {
		t.Run(map[bool]string{true: "ConsistentGetFromCache=true", false: "ConsistentGetFromCache=false"}[fromCache], func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.ConsistentGetFromCache, fromCache)
			client := etcdtest.Start(t).KubernetesClient()
			raw := newPodStore(t, client, protoCodec, transformer, "pods")
			rec := &txnRecorder{Interface: raw}
			e := startCache(t, client, rec)
			c := e.cacher
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			created := &example.Pod{}
			if err := c.Create(ctx, "/pods/ns/a", &example.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns"}}, created, 0); err != nil {
				t.Fatal(err)
			}
			// The cache holds the object before the update starts.
			if err := c.Get(ctx, "/pods/ns/a", storage.GetOptions{ResourceVersion: created.ResourceVersion}, &example.Pod{}); err != nil {
				t.Fatal(err)
			}
			// The first attempt loses to a write made straight to etcd.
			var other *example.Pod
			recorderKey := t.Name()
			opCtx := context.WithValue(ctx, storagetesting.RecorderContextKey, recorderKey)
			out := &example.Pod{}
			err := c.GuaranteedUpdate(opCtx, "/pods/ns/a", out, false, nil, storage.SimpleUpdate(func(in runtime.Object) (runtime.Object, error) {
				if other == nil {
					other = &example.Pod{}
					if err := raw.GuaranteedUpdate(ctx, "/pods/ns/a", other, false, nil, storage.SimpleUpdate(func(in runtime.Object) (runtime.Object, error) {
						p := in.(*example.Pod)
						p.Labels = map[string]string{"by": "other"}
						return p, nil
					}), nil); err != nil {
						t.Fatal(err)
					}
				}
				p := in.(*example.Pod)
				if p.Annotations == nil {
					p.Annotations = map[string]string{}
				}
				p.Annotations["by"] = "us"
				return p, nil
			}), nil)
			if err != nil {
				t.Fatal(err)
			}
			if out.Labels["by"] != "other" || out.Annotations["by"] != "us" {
				t.Errorf("the update kept labels %v, annotations %v; want both writes", out.Labels, out.Annotations)
			}
			stats := e.recorder.StatsForKey(recorderKey)
			if stats.Gets != 0 || stats.Writes != 2 || stats.Conflicts != 1 {
				t.Errorf("etcd requests %+v, want 2 writes, 1 conflict and no read", stats)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if !fromCache {
				if rec.guaranteedUpdates != 1 || len(rec.updateOnceRevs) != 0 {
					t.Errorf("gate off: %d GuaranteedUpdates and transactions from %v; want the store's GuaranteedUpdate alone", rec.guaranteedUpdates, rec.updateOnceRevs)
				}
				return
			}
			createdRV, otherRV := mustRV(t, created), mustRV(t, other)
			if rec.guaranteedUpdates != 0 || len(rec.updateOnceRevs) != 2 || rec.updateOnceRevs[0] != createdRV || rec.updateOnceRevs[1] != otherRV {
				t.Errorf("gate on: %d GuaranteedUpdates, transactions from %v; want two, from the cached %d then the cache at the winning write %d",
					rec.guaranteedUpdates, rec.updateOnceRevs, createdRV, otherRV)
			}
		})
	}
}

func mustRV(t *testing.T, obj runtime.Object) int64 {
	t.Helper()
	rv, err := storage.APIObjectVersioner{}.ObjectResourceVersion(obj)
	if err != nil {
		t.Fatal(err)
	}
	return int64(rv)
}
