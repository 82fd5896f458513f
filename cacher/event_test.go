package cacher

import (
	"testing"
	"unsafe"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"

	"github.com/watchkeeper/watchkeeper/internal/aliasing"

	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
)

// A new version of a cached object holds the old one's key and, where they
// did not change, its labels and fields: the history keeps both versions,
// and an update of a status or a spec field would otherwise keep two equal
// copies of each.
func TestUpdateSharesUnchangedAttributes(t *testing.T) {
	fs := cachertest.NewFakeStorage(100, cachertest.NewPod("a", 100, map[string]string{"app": "web"}, "n1"))
	c := newTestCacher(t, fs, nil)
	c.waitReady(t)
	sw, _ := fs.WaitWatch(t, 1)
	cached := func() *object {
		t.Helper()
		item, ok, _ := c.state.store.GetByKey("/pods/ns/a")
		if !ok {
			t.Fatal("pod a not cached")
		}
		return item.(*object)
	}
	v1 := cached()

	sw.Send(t, watch.Modified, cachertest.NewPod("a", 101, map[string]string{"app": "web"}, "n1"))
	c.waitRV(t, 101)
	v2 := cached()
	if v2 == v1 {
		t.Fatal("the update was not applied")
	}
	if unsafe.StringData(v2.key) != unsafe.StringData(v1.key) {
		t.Error("the new version holds a key of its own, want the old one's")
	}
	if !aliasing.Map(v2.labels, v1.labels) || !aliasing.Map(v2.fields, v1.fields) {
		t.Errorf("unchanged labels shared %v, fields shared %v; want both", aliasing.Map(v2.labels, v1.labels), aliasing.Map(v2.fields, v1.fields))
	}
	objLabels := func(o *object) map[string]string { return o.obj.(*example.Pod).Labels }
	if !aliasing.Map(objLabels(v2), objLabels(v1)) {
		t.Error("the new version's object holds labels of its own, want the old one's (versions.Share)")
	}

	// New labels and a new node: the new version's own, and right.
	sw.Send(t, watch.Modified, cachertest.NewPod("a", 102, map[string]string{"app": "db"}, "n2"))
	c.waitRV(t, 102)
	v3 := cached()
	if aliasing.Map(v3.labels, v2.labels) || aliasing.Map(v3.fields, v2.fields) {
		t.Errorf("changed labels shared %v, fields shared %v; want neither", aliasing.Map(v3.labels, v2.labels), aliasing.Map(v3.fields, v2.fields))
	}
	if aliasing.Map(objLabels(v3), objLabels(v2)) || objLabels(v3)["app"] != "db" || objLabels(v2)["app"] != "web" {
		t.Errorf("the object's labels: new %v, old %v, want app=db and app=web in maps of their own", objLabels(v3), objLabels(v2))
	}
	if v3.labels["app"] != "db" || v3.fields["spec.nodeName"] != "n2" {
		t.Errorf("new version's labels %v fields %v, want app=db and spec.nodeName=n2", v3.labels, v3.fields)
	}
	if v2.labels["app"] != "web" || v2.fields["spec.nodeName"] != "n1" {
		t.Errorf("old version's labels %v fields %v changed", v2.labels, v2.fields)
	}
}
