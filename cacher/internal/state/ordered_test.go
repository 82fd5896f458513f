package state

import (
	"slices"
	"testing"

	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
)

func TestOrderedObjectsUnder(t *testing.T) {
	keys := []string{"/pods/ns10/a", "/pods/ns1/b", "/pods/ns1/a", "/pods/ns2/a", "/podsx/ns1/a", "/pod/ns1/a"}
	var objs []any
	for _, k := range keys {
		objs = append(objs, &objects.Object{Key: k})
	}
	var o orderedObjects
	o.reset(objs)
	o.delete(&objects.Object{Key: "/pods/ns2/a"})
	o.set(&objects.Object{Key: "/pods/ns3/a"})
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"/pods/", []string{"/pods/ns1/a", "/pods/ns1/b", "/pods/ns10/a", "/pods/ns3/a"}},
		{"/pods/ns1/", []string{"/pods/ns1/a", "/pods/ns1/b"}},
		{"/pods/ns2/", nil},
		{"/pods/ns9/", nil},
		{"/", []string{"/pod/ns1/a", "/pods/ns1/a", "/pods/ns1/b", "/pods/ns10/a", "/pods/ns3/a", "/podsx/ns1/a"}},
	} {
		var got []string
		for _, obj := range o.under(tc.prefix) {
			got = append(got, obj.Key)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("under(%q) = %q, want %q", tc.prefix, got, tc.want)
		}
	}
}
