package cacher

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"google.golang.org/grpc/metadata"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"
	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
	"github.com/watchkeeper/watchkeeper/internal/aliasing"
	"github.com/watchkeeper/watchkeeper/internal/fixtures"
)

// Each cache's etcd watch and its progress requests share one gRPC stream
// of their own (etcd picks a stream by the request's metadata): not another
// resource's, whose lagging watch would keep etcd from answering, and not
// its backfill's, which starts behind.
func TestEachResourceWatchesOnItsOwnStream(t *testing.T) {
	streams := map[string]string{}
	for _, resource := range []string{"pods", "widgets"} {
		t.Run(resource, func(t *testing.T) { // each subtest owns its cacher
			fs := cachertest.NewFakeStorage(100)
			c := newTestCacher(t, fs, func(cfg *Config) { cfg.GroupResource = schema.GroupResource{Resource: resource} })
			c.waitReady(t)
			fs.WaitWatch(t, 1)
			c.feed.RequestProgress()
			cachertest.Poll(t, "a progress request", func() bool { return fs.ProgressCount() >= 1 })
			fs.Mu.Lock()
			watchMD, progressMD := mdString(fs.WatchMD[0]), mdString(fs.ProgressMD[0])
			fs.Mu.Unlock()
			if watchMD != progressMD {
				t.Errorf("%s: progress requests carry %s, the watch %s: etcd would answer on another stream", resource, progressMD, watchMD)
			}
			for other, md := range streams {
				if md == watchMD {
					t.Errorf("%s and %s watch on one stream (%s)", resource, other, md)
				}
			}
			streams[resource] = watchMD

			// A resume from before the list backfills on a stream of its own.
			fs.SetList(90)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				_ = c.feed.Backfill(ctx, 90)
			}()
			fs.WaitWatch(t, 2)
			fs.Mu.Lock()
			backfillMD := mdString(fs.WatchMD[1])
			fs.Mu.Unlock()
			if backfillMD == watchMD {
				t.Errorf("%s: the backfill watches on the cache's stream (%s)", resource, watchMD)
			}
		})
	}
}

// mdString is gRPC metadata in a stable order with its values: MD's own
// String redacts them since grpc-go 1.84, which would make every stream
// look alike.
func mdString(md metadata.MD) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(md)) {
		fmt.Fprintf(&b, "%s=%q;", k, md[k])
	}
	return b.String()
}

// A new version of a cached object holds the old one's key and, where they
// did not change, its labels and fields: the history keeps both versions,
// and an update of a status or a spec field would otherwise keep two equal
// copies of each.
func TestUpdateSharesUnchangedAttributes(t *testing.T) {
	fs := cachertest.NewFakeStorage(100, cachertest.NewPod("a", 100, map[string]string{"app": "web"}, "n1"))
	c := newTestCacher(t, fs, nil)
	c.waitReady(t)
	sw, _ := fs.WaitWatch(t, 1)
	cached := func() *objects.Object {
		t.Helper()
		o, ok, _ := c.state.Get("/pods/ns/a")
		if !ok {
			t.Fatal("pod a not cached")
		}
		return o
	}
	v1 := cached()

	sw.Send(t, watch.Modified, cachertest.NewPod("a", 101, map[string]string{"app": "web"}, "n1"))
	c.waitRV(t, 101)
	v2 := cached()
	if v2 == v1 {
		t.Fatal("the update was not applied")
	}
	if unsafe.StringData(v2.Key) != unsafe.StringData(v1.Key) {
		t.Error("the new version holds a key of its own, want the old one's")
	}
	if !aliasing.Map(v2.Labels, v1.Labels) || !aliasing.Map(v2.Fields, v1.Fields) {
		t.Errorf("unchanged labels shared %v, fields shared %v; want both", aliasing.Map(v2.Labels, v1.Labels), aliasing.Map(v2.Fields, v1.Fields))
	}
	// In compact form the object's own labels are not held: each read
	// decodes its own.
	decoded := !v1.IsCompact()
	objLabels := func(o *objects.Object) map[string]string {
		obj, err := o.Get()
		if err != nil {
			t.Fatal(err)
		}
		return obj.(*example.Pod).Labels
	}
	if decoded && !aliasing.Map(objLabels(v2), objLabels(v1)) {
		t.Error("the new version's object holds labels of its own, want the old one's (versions.Share)")
	}

	// New labels and a new node: the new version's own, and right.
	sw.Send(t, watch.Modified, cachertest.NewPod("a", 102, map[string]string{"app": "db"}, "n2"))
	c.waitRV(t, 102)
	v3 := cached()
	if aliasing.Map(v3.Labels, v2.Labels) || aliasing.Map(v3.Fields, v2.Fields) {
		t.Errorf("changed labels shared %v, fields shared %v; want neither", aliasing.Map(v3.Labels, v2.Labels), aliasing.Map(v3.Fields, v2.Fields))
	}
	if decoded && aliasing.Map(objLabels(v3), objLabels(v2)) || objLabels(v3)["app"] != "db" || objLabels(v2)["app"] != "web" {
		t.Errorf("the object's labels: new %v, old %v, want app=db and app=web in maps of their own", objLabels(v3), objLabels(v2))
	}
	if v3.Labels["app"] != "db" || v3.Fields["spec.nodeName"] != "n2" {
		t.Errorf("new version's labels %v fields %v, want app=db and spec.nodeName=n2", v3.Labels, v3.Fields)
	}
	if v2.Labels["app"] != "web" || v2.Fields["spec.nodeName"] != "n1" {
		t.Errorf("old version's labels %v fields %v changed", v2.Labels, v2.Fields)
	}
}

// Pods of one controller share what they have equal once cached: the
// listed ones and one added later by the watch, their labels (in the
// object and in the cache's attributes) held once; a pod of another
// controller with the same labels keeps its own. With ShareSiblings off
// every pod holds its own.
func TestSiblingsShareTheirLabelsFromListAndWatch(t *testing.T) {
	if fixtures.CompactTests() {
		t.Skip("compact form holds no decoded object to share (Config.Compact turns sharing with siblings off)")
	}
	owned := func(name string, rv uint64, owner string) *example.Pod {
		p := cachertest.NewPod(name, rv, map[string]string{"app": "web", "pod-template-hash": "5d8f"}, "n1")
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: owner, UID: types.UID("uid-" + owner), Controller: &yes}}
		return p
	}
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("ShareSiblings=%v", on), func(t *testing.T) {
			// The fake storage hands the cache the very objects it holds:
			// each gets labels of its own, as decoding would.
			fs := cachertest.NewFakeStorage(100, owned("a", 99, "rs1"), owned("b", 100, "rs1"), owned("x", 100, "rs2"))
			c := newTestCacher(t, fs, func(cfg *Config) { cfg.ShareSiblings = on })
			c.waitReady(t)
			sw, _ := fs.WaitWatch(t, 1)
			sw.Send(t, watch.Added, owned("d", 101, "rs1"))
			c.waitRV(t, 101)
			cached := func(name string) *objects.Object {
				t.Helper()
				o, ok, _ := c.state.Get("/pods/ns/" + name)
				if !ok {
					t.Fatalf("pod %s not cached", name)
				}
				return o
			}
			a, b, d, x := cached("a"), cached("b"), cached("d"), cached("x")
			objLabels := func(o *objects.Object) map[string]string { return o.Decoded().(*example.Pod).Labels }
			for _, o := range []*objects.Object{b, d} {
				shared := aliasing.Map(objLabels(o), objLabels(a)) && aliasing.Map(o.Labels, a.Labels)
				if shared != on {
					t.Errorf("%s shares a's labels (object and attributes): %v, want %v", o.Key, shared, on)
				}
				if o.Labels["app"] != "web" || o.Fields["metadata.name"] != o.Decoded().(*example.Pod).Name {
					t.Errorf("%s reads labels %v fields %v", o.Key, o.Labels, o.Fields)
				}
			}
			if aliasing.Map(objLabels(x), objLabels(a)) {
				t.Error("a pod of another controller shares rs1's labels")
			}
		})
	}
}
