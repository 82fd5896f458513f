package integration

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apisharding "k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/v1alpha1"
)

// shardSelectors splits the UID hash space in n equal ranges, as
// kube-state-metrics' shards do.
func shardSelectors(n int) []string {
	span := ^uint64(0)/uint64(n) + 1
	out := make([]string, n)
	for i := range n {
		end := fmt.Sprintf("0x%016x", uint64(i+1)*span)
		if i == n-1 {
			end = "0x10000000000000000"
		}
		out[i] = fmt.Sprintf("shardRange(object.metadata.uid, '0x%016x', '%s')", uint64(i)*span, end)
	}
	return out
}

// shardOf is the shard of n a UID hashes into, computed as apimachinery does.
func shardOf(uid string, n int) int {
	h, _ := strconv.ParseUint(apisharding.HashField(uid), 16, 64)
	span := ^uint64(0)/uint64(n) + 1
	return int(h / span)
}

// Kubernetes 1.38's sharded list and watch (ShardedListAndWatch, on by
// default) through the API with client-go, on watchkeeper's cache and on
// upstream's: each shard's list holds exactly the widgets whose UID hashes
// into it and says which shard it is; each shard's watch then gets exactly
// the new widgets of its shard; the shards together are every widget, once.
// Both caches give the same answer.
func TestSampleServerShardedListAndWatch(t *testing.T) {
	t.Parallel() // its own server and etcd
	const shards, before, after = 4, 24, 24
	selectors := shardSelectors(shards)
	answers := map[string]bool{}
	for _, d := range []string{"watchkeeper", "upstream"} {
		t.Run(d, func(t *testing.T) {
			s := startSampleServer(t, "--watch-cache-decorator="+d)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			widgets := s.Client.DemoV1alpha1().Widgets("default")
			uidOf := map[string]string{}
			create := func(name string) {
				w, err := widgets.Create(ctx, &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.WidgetSpec{Size: 1}}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				uidOf[name] = string(w.UID)
			}
			for i := range before {
				create(fmt.Sprintf("before-%02d", i))
			}
			seen := make([]map[string]bool, shards)
			watches := make([]watch.Interface, shards)
			for i, sel := range selectors {
				// RV "0" is served from the cache; the watch then starts at
				// the list's RV.
				list, err := widgets.List(ctx, metav1.ListOptions{ResourceVersion: "0", ShardSelector: sel})
				if err != nil {
					t.Fatalf("shard %d: %v", i, err)
				}
				if list.ShardInfo == nil || list.ShardInfo.Selector != sel {
					t.Errorf("shard %d: list's shardInfo %+v, want selector %q", i, list.ShardInfo, sel)
				}
				seen[i] = map[string]bool{}
				for _, w := range list.Items {
					seen[i][w.Name] = true
				}
				if watches[i], err = widgets.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion, ShardSelector: sel}); err != nil {
					t.Fatalf("shard %d watch: %v", i, err)
				}
				defer watches[i].Stop()
			}
			for i := range after {
				create(fmt.Sprintf("after-%02d", i))
			}
			// Each watch reads until it has each of its shard's new
			// widgets, by name: a list at RV "0" may come from a state
			// before the last of the "before" widgets, which the watch then
			// brings too (counting events stopped short of an "after" one).
			// One of another shard would be seen below.
			for i, w := range watches {
				missing := map[string]bool{}
				for name, uid := range uidOf {
					if name[:5] == "after" && shardOf(uid, shards) == i {
						missing[name] = true
					}
				}
				for len(missing) > 0 {
					select {
					case ev := <-w.ResultChan():
						if ev.Type != watch.Added {
							t.Fatalf("shard %d: %v event, want ADDED", i, ev.Type)
						}
						name := ev.Object.(*v1alpha1.Widget).Name
						seen[i][name] = true
						delete(missing, name)
					case <-ctx.Done():
						t.Fatalf("shard %d: its new widgets %v not seen within 60s", i, slices.Sorted(maps.Keys(missing)))
					}
				}
			}
			// Every widget in its own shard's list or watch, in no other.
			for name, uid := range uidOf {
				shard := shardOf(uid, shards)
				for i := range shards {
					if seen[i][name] != (i == shard) {
						t.Errorf("%s (shard %d): in shard %d's list or watch: %v", name, shard, i, seen[i][name])
					}
				}
			}
			answers[d] = true
		})
	}
	// The server picks the UIDs, so the two servers' shards hold different
	// names: each cache is judged against the shard its UIDs hash into.
	if len(answers) != 2 {
		t.Errorf("answers from %d caches, want both", len(answers))
	}
}
