package cacher

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"
	"github.com/watchkeeper/watchkeeper/internal/fixtures"
)

// failingCodec is the fixtures' codec with decoding failing on demand.
type failingCodec struct {
	kruntime.Codec
	failing func() bool
}

func (c failingCodec) Decode(data []byte, gvk *schema.GroupVersionKind, into kruntime.Object) (kruntime.Object, *schema.GroupVersionKind, error) {
	if c.failing() {
		return nil, nil, errors.New("corrupt")
	}
	return c.Codec.Decode(data, gvk, into)
}

// A cache in compact form holds its objects as bytes and answers lists,
// gets and watches with the objects it was given, each a copy of its own.
func TestCompactCacheServesItsObjectsFromBytes(t *testing.T) {
	a := cachertest.NewPod("a", 100, map[string]string{"app": "web"}, "n1")
	b := cachertest.NewPod("b", 100, map[string]string{"app": "db"}, "n2")
	fs := cachertest.NewFakeStorage(100, a, b)
	var failing bool
	c := newTestCacher(t, fs, func(cfg *Config) {
		cfg.Compact = true
		cfg.Codec = failingCodec{fixtures.ProtoCodec, func() bool { return failing }}
	})
	c.waitReady(t)
	sw, _ := fs.WaitWatch(t, 1)
	for _, key := range []string{"/pods/ns/a", "/pods/ns/b"} {
		if o, ok, _ := c.state.Get(key); !ok || !o.IsCompact() {
			t.Fatalf("%s: held %v, compact %v; want a compact object", key, ok, ok && o.IsCompact())
		}
	}

	list := &example.PodList{}
	if err := c.GetList(context.Background(), "/pods/", storage.ListOptions{ResourceVersion: "0", Recursive: true, Predicate: storage.Everything}, list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 2 || !reflect.DeepEqual(&list.Items[0], a) || !reflect.DeepEqual(&list.Items[1], b) {
		t.Fatalf("listed %+v, want a and b as given", list.Items)
	}
	list.Items[0].Labels["app"] = "written by a client"
	got := &example.Pod{}
	if err := c.Get(context.Background(), "/pods/ns/a", storage.GetOptions{ResourceVersion: "0"}, got); err != nil || !reflect.DeepEqual(got, a) {
		t.Fatalf("get a after a client wrote its listed copy: %+v, %v; want a as given", got, err)
	}

	w := c.startWatch(t, context.Background(), "100", storage.Everything)
	b2 := cachertest.NewPod("b", 101, map[string]string{"app": "db"}, "n3")
	sw.Send(t, watch.Modified, b2.DeepCopy())
	select {
	case ev := <-w.ResultChan():
		if ev.Type != watch.Modified || !reflect.DeepEqual(ev.Object.(kruntime.CacheableObject).GetObject(), b2) {
			t.Errorf("watch got %s %+v, want MODIFIED b at 101", ev.Type, ev.Object)
		}
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("no event for the update")
	}

	// Bytes that no longer decode fail the read, never answer a part.
	failing = true
	if err := c.GetList(context.Background(), "/pods/", storage.ListOptions{ResourceVersion: "0", Recursive: true, Predicate: storage.Everything}, &example.PodList{}); err == nil {
		t.Error("a list of objects that do not decode succeeded")
	}
	if err := c.Get(context.Background(), "/pods/ns/a", storage.GetOptions{ResourceVersion: "0"}, &example.Pod{}); err == nil {
		t.Error("a get of an object that does not decode succeeded")
	}
}

// Compact form needs the codec it encodes with.
func TestCompactWithoutACodecIsAConfigError(t *testing.T) {
	cfg := Config{Compact: true}
	cfg.Storage = cachertest.NewFakeStorage(1)
	cfg.ResourcePrefix = "/pods/"
	cfg.KeyFunc, cfg.GetAttrsFunc = cachertest.PodKey, cachertest.PodAttrs
	cfg.NewFunc = func() kruntime.Object { return &example.Pod{} }
	cfg.NewListFunc = func() kruntime.Object { return &example.PodList{} }
	if err := cfg.complete(); err == nil {
		t.Error("Compact without a Codec accepted")
	}
}
