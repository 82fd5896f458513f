package objects

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"testing"
	"unsafe"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/apis/example"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"
)

func sharedPod(t *testing.T) (*example.Pod, *SharedObject) {
	t.Helper()
	pod := cachertest.NewPod("a", 7, map[string]string{"app": "x"}, "node1")
	s, err := Share(pod)
	if err != nil {
		t.Fatal(err)
	}
	return pod, s
}

// One encoding per encoder identity, whatever the number of clients, and the
// encoder never gets the shared object itself (it may set the kind on it).
func TestCacheEncodeOncePerIdentifier(t *testing.T) {
	pod, s := sharedPod(t)
	var mu sync.Mutex
	calls := map[runtime.Identifier]int{}
	encoder := func(id runtime.Identifier) func(runtime.Object, io.Writer) error {
		return func(obj runtime.Object, w io.Writer) error {
			if obj == runtime.Object(pod) {
				t.Error("the encoder was handed the shared object")
			}
			obj.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{Kind: "Pod"})
			mu.Lock()
			calls[id]++
			mu.Unlock()
			return json.NewEncoder(w).Encode(map[string]string{"id": string(id), "name": obj.(*example.Pod).Name})
		}
	}
	var wg sync.WaitGroup
	outs := make([]bytes.Buffer, 40)
	for i := range outs {
		id := runtime.Identifier("json")
		if i%2 == 1 {
			id = "protobuf"
		}
		wg.Go(func() {
			if err := s.ForWatcher().CacheEncode(id, encoder(id), &outs[i]); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if calls["json"] != 1 || calls["protobuf"] != 1 {
		t.Fatalf("encodings per identifier: %v, want one each", calls)
	}
	for i := range outs {
		if outs[i].String() != outs[i%2].String() {
			t.Fatalf("client %d got %q, client %d %q", i, outs[i].String(), i%2, outs[i%2].String())
		}
	}
	if !pod.GetObjectKind().GroupVersionKind().Empty() {
		t.Fatal("encoding changed the shared object's kind")
	}
}

// A client that changes its object gets its own copy: the shared object and
// every other client's view stay as they were, and its encoding is its own.
func TestCacheableCopyOnWrite(t *testing.T) {
	pod, s := sharedPod(t)
	mine, theirs := s.ForWatcher(), s.ForWatcher()
	mine.SetResourceVersion("99")
	mine.SetLabels(map[string]string{"app": "y"})
	mine.SetGroupVersionKind(schema.GroupVersionKind{Kind: "Pod"})
	if pod.ResourceVersion != "7" || pod.Labels["app"] != "x" || !pod.GroupVersionKind().Empty() {
		t.Fatalf("the shared object changed: %+v", pod.ObjectMeta)
	}
	if theirs.GetResourceVersion() != "7" || theirs.GetLabels()["app"] != "x" || !theirs.GroupVersionKind().Empty() {
		t.Fatalf("another client sees the change: rv %s labels %v", theirs.GetResourceVersion(), theirs.GetLabels())
	}
	if mine.GetResourceVersion() != "99" || mine.GetLabels()["app"] != "y" || mine.GroupVersionKind().Kind != "Pod" {
		t.Fatalf("the client does not see its own change: rv %s labels %v", mine.GetResourceVersion(), mine.GetLabels())
	}
	name := func(obj runtime.Object, w io.Writer) error {
		_, err := io.WriteString(w, obj.(*example.Pod).ResourceVersion)
		return err
	}
	var a, b bytes.Buffer
	if err := theirs.CacheEncode("id", name, &a); err != nil {
		t.Fatal(err)
	}
	if err := mine.CacheEncode("id", name, &b); err != nil {
		t.Fatal(err)
	}
	if a.String() != "7" || b.String() != "99" {
		t.Fatalf("encodings %q and %q, want 7 and 99", a.String(), b.String())
	}
	// GetObject and DeepCopyObject hand out plain copies the caller owns.
	for _, obj := range []runtime.Object{theirs.GetObject(), theirs.DeepCopyObject()} {
		p, ok := obj.(*example.Pod)
		if !ok || p == pod {
			t.Fatalf("got %T (same pointer: %v), want a copy of the pod", obj, p == pod)
		}
		p.Labels["app"] = "z"
		if pod.Labels["app"] != "x" {
			t.Fatal("changing a copy changed the shared object")
		}
	}
}

// An encoding error reaches every client and is not retried per client.
func TestCacheEncodeError(t *testing.T) {
	_, s := sharedPod(t)
	boom := errors.New("boom")
	calls := 0
	fail := func(runtime.Object, io.Writer) error { calls++; return boom }
	for range 3 {
		if err := s.ForWatcher().CacheEncode("id", fail, io.Discard); !errors.Is(err, boom) {
			t.Fatalf("err = %v, want boom", err)
		}
	}
	if calls != 1 {
		t.Fatalf("encoder called %d times, want 1", calls)
	}
}

// BenchmarkCacheEncodeShared is many watches writing one event's cached
// encoding at once, as the HTTP handlers of a fan-out do.
func BenchmarkCacheEncodeShared(b *testing.B) {
	pod := cachertest.NewPod("a", 7, map[string]string{"app": "x"}, "node1")
	s, err := Share(pod)
	if err != nil {
		b.Fatal(err)
	}
	encode := func(obj runtime.Object, w io.Writer) error {
		return json.NewEncoder(w).Encode(obj)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := s.ForWatcher().CacheEncode("json", encode, io.Discard); err != nil {
				b.Error(err)
			}
		}
	})
}

// The dispatcher allocates a handle per delivery, a thousand per event at a
// thousand watchers: it stays in the 16-byte size class, its own copy kept
// behind a pointer (48 bytes per delivery when the copy was inline).
func TestHandleIsTwoWords(t *testing.T) {
	if n := unsafe.Sizeof(CacheableObject{}); n > 16 {
		t.Fatalf("cacheableObject is %d bytes, want at most 16", n)
	}
}
