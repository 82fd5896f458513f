package cachertest

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/sharding"
	"k8s.io/apiserver/pkg/storage"
)

// ShardPred is a predicate selecting everything of the shard expr names.
func ShardPred(t testing.TB, expr string) storage.SelectionPredicate {
	t.Helper()
	sel, err := sharding.Parse(expr)
	if err != nil {
		t.Fatal(err)
	}
	pred := storage.Everything
	pred.ShardSelector = sel
	return pred
}

// ShardRange is the selector of n equal ranges' i-th.
func ShardRange(field string, i, n int) string {
	span := ^uint64(0)/uint64(n) + 1
	end := fmt.Sprintf("'0x%016x'", uint64(i+1)*span)
	if i == n-1 {
		end = "'0x10000000000000000'"
	}
	return fmt.Sprintf("shardRange(%s, '0x%016x', %s)", field, uint64(i)*span, end)
}

// ShardPod is a pod with a UUID-shaped UID drawn from its name, so the
// UIDs' hashes spread over the whole space as real ones do (FNV-1a's top
// bits hardly move for strings alike but in their last characters).
func ShardPod(name, namespace string) *example.Pod {
	r := rand.New(rand.NewPCG(fnv1a(namespace), fnv1a(name)))
	uid := fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", r.Uint32(), r.Uint32()&0xffff, r.Uint32()&0xffff, r.Uint32()&0xffff, r.Uint64()&0xffffffffffff)
	return &example.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, UID: types.UID(uid)}}
}

func fnv1a(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}
