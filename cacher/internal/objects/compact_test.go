package objects_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/client-go/tools/cache"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"
	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
	"github.com/watchkeeper/watchkeeper/internal/fixtures"
)

// countingCodec counts decodes, and fails them while failing is set.
type countingCodec struct {
	runtime.Codec
	decodes int
	failing bool
}

func (c *countingCodec) Decode(data []byte, gvk *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	c.decodes++
	if c.failing {
		return nil, nil, errors.New("corrupt")
	}
	return c.Codec.Decode(data, gvk, into)
}

func nodeName(obj runtime.Object) string { return obj.(*example.Pod).Spec.NodeName }

func compactPod(t *testing.T, codec runtime.Codec, trigger *objects.Trigger, indexers *cache.Indexers) (*example.Pod, *objects.Object) {
	t.Helper()
	c, err := objects.NewCompactor(codec, storage.APIObjectVersioner{}, trigger, indexers)
	if err != nil {
		t.Fatal(err)
	}
	pod := cachertest.NewPod("a", 42, map[string]string{"app": "web"}, "n1")
	pod.Spec.Hostname, pod.Spec.ServiceAccountName = "a", "default"
	o, err := c.Hold("/pods/ns/a", pod.DeepCopy(), labels.Set(pod.Labels), fields.Set{"spec.nodeName": "n1"})
	if err != nil {
		t.Fatal(err)
	}
	return pod, o
}

func TestCompactReadsAsTheObjectItHolds(t *testing.T) {
	pod, o := compactPod(t, fixtures.ProtoCodec, nil, nil)
	if !o.IsCompact() || o.Decoded() != nil {
		t.Fatalf("held compact %v, decoded %v; want true, nil", o.IsCompact(), o.Decoded())
	}
	got, err := o.Get()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, pod) {
		t.Fatalf("read back %#v, want %#v", got, pod)
	}
	// Each read is the reader's own: one written does not change the next.
	got.(*example.Pod).Labels["app"] = "db"
	copied, err := o.Copy()
	if err != nil {
		t.Fatal(err)
	}
	again, _ := o.Get()
	if !reflect.DeepEqual(again, pod) || !reflect.DeepEqual(copied, pod) || again == copied {
		t.Errorf("after writing one read, the next read %v and copy %v; want both as cached, apart", again, copied)
	}
	if o.Key != "/pods/ns/a" || o.Labels["app"] != "web" || o.Fields["spec.nodeName"] != "n1" {
		t.Errorf("held key %q, labels %v, fields %v", o.Key, o.Labels, o.Fields)
	}
}

func TestCompactAnswersWhatTheCacheAsksWithoutADecode(t *testing.T) {
	codec := &countingCodec{Codec: fixtures.ProtoCodec}
	trigger, err := objects.NewTrigger(storage.IndexerFuncs{"spec.nodeName": nodeName})
	if err != nil {
		t.Fatal(err)
	}
	indexers := &cache.Indexers{
		"f:spec.nodeName": func(obj any) ([]string, error) { return []string{nodeName(obj.(runtime.Object))}, nil },
		"by-name":         func(obj any) ([]string, error) { return []string{obj.(*example.Pod).Name}, nil },
	}
	_, o := compactPod(t, codec, trigger, indexers)
	codec.decodes = 0
	if rv, err := o.RV(storage.APIObjectVersioner{}); err != nil || rv != 42 {
		t.Errorf("RV %d, %v; want 42", rv, err)
	}
	if v := trigger.Of(o); v != "n1" {
		t.Errorf("trigger value %q, want n1", v)
	}
	for name, want := range map[string]string{"f:spec.nodeName": "n1", "by-name": "a"} {
		if v, err := o.IndexValues(name, (*indexers)[name]); err != nil || len(v) != 1 || v[0] != want {
			t.Errorf("index %s: %v, %v; want [%s]", name, v, err, want)
		}
	}
	if codec.decodes != 0 {
		t.Errorf("%d decodes for the RV, trigger and index values, want 0: they are taken as the object enters", codec.decodes)
	}
	// A trigger it was not held with reads the object.
	other, _ := objects.NewTrigger(storage.IndexerFuncs{"spec.nodeName": nodeName})
	if v := other.Of(o); v != "n1" || codec.decodes != 1 {
		t.Errorf("another trigger: %q after %d decodes, want n1 after 1", v, codec.decodes)
	}
}

func TestCompactReadThatCannotDecodeSaysWhich(t *testing.T) {
	codec := &countingCodec{Codec: fixtures.ProtoCodec}
	_, o := compactPod(t, codec, nil, nil)
	codec.failing = true
	for name, read := range map[string]func() (runtime.Object, error){"Get": o.Get, "Copy": o.Copy} {
		if obj, err := read(); err == nil || obj != nil || !strings.Contains(err.Error(), "/pods/ns/a") {
			t.Errorf("%s of a corrupt object: %v, %v; want an error naming its key", name, obj, err)
		}
	}
}

func TestCompactNeedsACodec(t *testing.T) {
	if _, err := objects.NewCompactor(nil, storage.APIObjectVersioner{}, nil, nil); err == nil {
		t.Error("a compactor without a codec, want an error")
	}
}
