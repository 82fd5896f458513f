package integration

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"

	"github.com/watchkeeper/watchkeeper/decorator"
	"github.com/watchkeeper/watchkeeper/internal/etcdtest"
	"github.com/watchkeeper/watchkeeper/internal/fixtures"
	"github.com/watchkeeper/watchkeeper/options"
)

// The decorator builds the raw etcd3 storage itself from a storagebackend
// config, wraps it with the configured cache, and its DestroyFunc stops both,
// once.
func TestDecoratorEndToEnd(t *testing.T) {
	etcd := etcdtest.Start(t)
	opts := options.NewWatchCacheOptions()
	opts.BookmarkFrequency = time.Second
	opts.BookmarkPreDeadlineOffset = 500 * time.Millisecond
	d, err := decorator.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	cfg := storagebackend.NewDefaultConfig("/registry", protoCodec)
	cfg.Transport.ServerList = etcd.Endpoints()
	s, destroy, err := d(cfg.ForResource(schema.GroupResource{Resource: "pods"}), "/pods/",
		func(obj runtime.Object) (string, error) { return storage.NamespaceKeyFunc("/pods/", obj) },
		fixtures.PodReverseKeyFunc("/pods"), newPod, newPodList, podAttrs, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer destroy()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return s.ReadinessCheck() == nil, nil
	}); err != nil {
		t.Fatalf("decorated storage never became ready: %v (%v)", s.ReadinessCheck(), err)
	}

	out := &example.Pod{}
	pod := &example.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
	if err := s.Create(ctx, "/pods/ns/p", pod, out, 0); err != nil {
		t.Fatal(err)
	}
	pred := storage.Everything
	pred.AllowWatchBookmarks = true
	w, err := s.Watch(ctx, "/pods/", storage.ListOptions{ResourceVersion: out.ResourceVersion, Recursive: true, Predicate: pred})
	if err != nil {
		t.Fatal(err)
	}
	// A one-second frequency proves the options reached the cache: upstream's
	// would be silent for a minute.
	select {
	case ev := <-w.ResultChan():
		if ev.Type != watch.Bookmark {
			t.Fatalf("first event %v, want a bookmark", ev.Type)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no bookmark within 5s at a 1s frequency")
	}
	w.Stop()

	destroy()
	destroy() // safe twice
	if err := s.ReadinessCheck(); err == nil {
		t.Fatal("storage still ready after destroy")
	}
}
