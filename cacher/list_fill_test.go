package cacher

import (
	"fmt"
	"reflect"
	"slices"
	"testing"

	"k8s.io/apiserver/pkg/apis/example"
)

// A list of everything is made as long as the hint says and fitted to what
// the walk found: a past state may hold fewer or more objects than the
// checkpoint the hint was read from.
func TestCopyAllFitsItsHint(t *testing.T) {
	var objs []*object
	for i := range 5 {
		objs = append(objs, &object{key: fmt.Sprintf("/pods/ns/p%d", i), obj: newTestPod(fmt.Sprintf("p%d", i), 10, nil, "")})
	}
	for _, hint := range []int{1, 4, 5, 6, 50} {
		list := &example.PodList{}
		p := copyAll(reflect.ValueOf(&list.Items).Elem(), slices.Values(objs), hint)
		var names []string
		for _, pod := range list.Items {
			names = append(names, pod.Name)
		}
		if want := []string{"p0", "p1", "p2", "p3", "p4"}; !slices.Equal(names, want) {
			t.Errorf("hint %d: listed %v, want %v", hint, names, want)
		}
		if p.fetched != 5 || p.total != 5 || p.lastKey != "/pods/ns/p4" || p.hasMore {
			t.Errorf("hint %d: page %+v, want 5 fetched, 5 in all, last /pods/ns/p4, no more", hint, p)
		}
	}
}
