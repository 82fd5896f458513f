package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchkeeper/watchkeeper/internal/etcdtest"
)

// List shapes the two caches once answered differently, asked of both over
// one etcd: watchkeeper must answer as upstream's cache does. RV "0" lists
// take any state, and upstream's cache ignores their limit
// (computeListLimit): a first page, and a later page asked for with a
// continue token, return everything there is from their start, with no
// token.
func TestSampleServerListParity(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t)
	decorators := []string{"watchkeeper", "upstream"}
	servers := map[string]*sampleServer{}
	for _, d := range decorators {
		servers[d] = startSampleServer(t, "--etcd-servers="+etcd.Endpoints()[0], "--watch-cache-decorator="+d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), ssTestDeadline)
	defer cancel()
	const ns = "parity"
	ssCreateWidgets(ctx, t, servers["watchkeeper"].Client, ns, "w", 5)

	// A consistent first page of 2 from each server: both caches have then
	// applied every write, and each hands out the token of its own page.
	tokens := map[string]string{}
	for _, d := range decorators {
		first, err := servers[d].Client.DemoV1alpha1().Widgets(ns).List(ctx, metav1.ListOptions{Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(first.Items) != 2 || first.Continue == "" {
			t.Fatalf("%s: consistent first page of 2: %d items, continue %q", d, len(first.Items), first.Continue)
		}
		tokens[d] = first.Continue
	}

	answer := func(d string, opts metav1.ListOptions) string {
		t.Helper()
		list, err := servers[d].Client.DemoV1alpha1().Widgets(ns).List(ctx, opts)
		if err != nil {
			return "error: " + err.Error()
		}
		var names []string
		for _, w := range list.Items {
			names = append(names, w.Name)
		}
		return fmt.Sprintf("items [%s] continue=%t", strings.Join(names, " "), list.Continue != "")
	}
	for _, shape := range []struct {
		name string
		opts func(d string) metav1.ListOptions
		want string
	}{
		{
			"first page, RV 0, limit 2",
			func(string) metav1.ListOptions { return metav1.ListOptions{ResourceVersion: "0", Limit: 2} },
			"items [w-0 w-1 w-2 w-3 w-4] continue=false",
		},
		{
			"continue, RV 0, limit 2",
			func(d string) metav1.ListOptions {
				return metav1.ListOptions{ResourceVersion: "0", Limit: 2, Continue: tokens[d]}
			},
			"items [w-2 w-3 w-4] continue=false",
		},
	} {
		got := map[string]string{}
		for _, d := range decorators {
			got[d] = answer(d, shape.opts(d))
		}
		t.Logf("%s: watchkeeper %s; upstream %s", shape.name, got["watchkeeper"], got["upstream"])
		if got["upstream"] != shape.want {
			t.Errorf("%s: upstream's cache answered %s, want %s (the test's expectation of upstream is wrong)", shape.name, got["upstream"], shape.want)
		}
		if got["watchkeeper"] != got["upstream"] {
			t.Errorf("%s: watchkeeper answered %s, upstream's cache %s", shape.name, got["watchkeeper"], got["upstream"])
		}
	}
}
