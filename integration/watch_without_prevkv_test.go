package integration

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
)

// With WatchFromStorageWithoutPrevKV the cache's etcd watch carries no
// previous values: a DELETE names the object only. Clients still get the
// whole object at the delete's RV, from the cache, and a selector on its
// labels still sees the delete; with the gate off, etcd's previous value.
func TestDeleteCarriesTheCachedObjectWithoutPrevKV(t *testing.T) {
	for _, withoutPrevKV := range []bool{true, false} {
		t.Run(map[bool]string{true: "WithoutPrevKV", false: "WithPrevKV"}[withoutPrevKV], func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.WatchFromStorageWithoutPrevKV, withoutPrevKV)
			e := setup(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			pod := &example.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", Labels: map[string]string{"app": "web"}},
				Spec:       example.PodSpec{NodeName: "node-1"},
			}
			created := &example.Pod{}
			if err := e.cacher.Create(ctx, "/pods/ns/a", pod, created, 0); err != nil {
				t.Fatal(err)
			}
			pred := storage.Everything
			pred.Label = labels.SelectorFromSet(labels.Set{"app": "web"})
			w, err := e.cacher.Watch(ctx, "/pods/", storage.ListOptions{ResourceVersion: created.ResourceVersion, Recursive: true, Predicate: pred})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			deleted := &example.Pod{}
			if err := e.cacher.Delete(ctx, "/pods/ns/a", deleted, nil, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			select {
			case ev := <-w.ResultChan():
				obj := ev.Object
				if c, ok := obj.(runtime.CacheableObject); ok {
					obj = c.GetObject()
				}
				got, ok := obj.(*example.Pod)
				if ev.Type != watch.Deleted || !ok {
					t.Fatalf("got %v %T, want DELETED of a pod", ev.Type, ev.Object)
				}
				if got.Labels["app"] != "web" || got.Spec.NodeName != "node-1" || got.UID != created.UID {
					t.Errorf("DELETED carries labels %v, node %q, uid %q; want the whole object (app=web, node-1, %q)", got.Labels, got.Spec.NodeName, got.UID, created.UID)
				}
				if got.ResourceVersion != deleted.ResourceVersion {
					t.Errorf("DELETED at RV %s, want the delete's %s", got.ResourceVersion, deleted.ResourceVersion)
				}
			case <-ctx.Done():
				t.Fatal("no DELETED within 30s")
			}
		})
	}
}
