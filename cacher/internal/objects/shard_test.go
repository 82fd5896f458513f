package objects

import (
	"fmt"
	"testing"

	apisharding "k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"
)

// shardPod is cachertest.ShardPod as the cache holds it.
func shardPod(name, namespace string) *Object {
	return NewDecoded("/pods/"+namespace+"/"+name, cachertest.ShardPod(name, namespace), nil, nil)
}

// The compiled filter selects exactly what upstream's selector does, for
// both shard fields, one range or several, and the top of the hash space.
func TestShardFilterAgreesWithUpstreamsSelector(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.ShardedListAndWatch, true)
	var objs []*Object
	for i := range 500 {
		objs = append(objs, shardPod(fmt.Sprintf("p%d", i), fmt.Sprintf("ns%d", i%37)))
	}
	exprs := []string{
		cachertest.ShardRange(ShardFieldUID, 0, 1),
		cachertest.ShardRange(ShardFieldUID, 0, 2), cachertest.ShardRange(ShardFieldUID, 1, 2),
		cachertest.ShardRange(ShardFieldUID, 3, 7), cachertest.ShardRange(ShardFieldUID, 6, 7),
		cachertest.ShardRange(ShardFieldNamespace, 2, 5),
		cachertest.ShardRange(ShardFieldUID, 0, 4) + " || " + cachertest.ShardRange(ShardFieldUID, 2, 4),
		"shardRange(object.metadata.uid, '0xfffffffffffffff0', '0x10000000000000000')",
	}
	for _, expr := range exprs {
		pred := cachertest.ShardPred(t, expr)
		f, err := NewShardFilter(pred)
		if err != nil || f == nil {
			t.Fatalf("%s: filter %v, %v", expr, f, err)
		}
		for _, o := range objs {
			want, err := pred.ShardSelector.Matches(o.Decoded())
			if err != nil {
				t.Fatal(err)
			}
			if got := f.Selects(o); got != want {
				t.Fatalf("%s: %s selected %v, upstream's selector %v", expr, o.Key, got, want)
			}
			if got := matches(pred, o); got != want {
				t.Fatalf("%s: matches(%s) = %v, upstream's selector %v", expr, o.Key, got, want)
			}
			if got := MatcherFor(pred)(o); got != want {
				t.Fatalf("%s: matcherFor(%s) = %v, upstream's selector %v", expr, o.Key, got, want)
			}
		}
	}
	for _, s := range []string{"", "a", "0a4c1d7e-4f2b-4c5e-9b1a-2f7e3d6c8b90", "kube-system"} {
		if got, want := fmt.Sprintf("%016x", fnv64a(s)), apisharding.HashField(s); got != want {
			t.Errorf("fnv64a(%q) = %s, apimachinery's HashField %s", s, got, want)
		}
	}
}

// With the gate off a shard selector is ignored, as upstream's predicate
// ignores it: no filter, and matches selects everything.
func TestShardSelectorIgnoredWithTheGateOff(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.ShardedListAndWatch, false)
	pred := cachertest.ShardPred(t, cachertest.ShardRange(ShardFieldUID, 0, 2))
	if f, err := NewShardFilter(pred); f != nil || err != nil {
		t.Fatalf("gate off: filter %v, %v; want none", f, err)
	}
	o := shardPod("a", "ns")
	if !matches(pred, o) {
		t.Fatal("gate off: a shard selector filtered an object")
	}
}
