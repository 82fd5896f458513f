package integration

import (
	"context"
	"testing"

	"github.com/watchkeeper/watchkeeper/internal/testchild"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A kubectl-style paginated list (pages of 500) and an exact-RV list of
// 1,200 widgets over HTTP cost etcd no list request: later pages come from
// the cache's snapshot at the first page's RV, the exact-RV list from the
// snapshot at its RV (issue 12). The sample apiserver runs in this process,
// so etcd_requests_total is read from its registry.
func TestSampleServerPaginatedListsFromSnapshots(t *testing.T) {
	t.Parallel() // in a process of its own: it reads the process-wide metrics
	if !testchild.Isolate(t) {
		return
	}
	const widgets, page = 1200, 500
	s := startSampleServer(t)
	// 1,200 creates one after another took over 30s with make test and a
	// cold build beside it: the writes are set-up, so they go 16 at a time
	// with room to spare.
	ctx, cancel := context.WithTimeout(context.Background(), 4*ssTestDeadline)
	defer cancel()
	ssCreateWidgets(ctx, t, s.Client, "pages", "w", widgets)
	// A consistent list first: it returns once the cache has caught up.
	if _, err := s.Client.DemoV1alpha1().Widgets("pages").List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		t.Fatal(err)
	}
	etcdLists := func() float64 {
		total := 0.0
		for _, op := range []string{"list", "listWithCount", "listOnlyKeys", "listStream"} {
			v, _ := metricValue(t, "etcd_requests_total", map[string]string{"operation": op, "resource": "widgets"})
			total += v
		}
		return total
	}
	before := etcdLists()

	got, pages, continueToken, firstRV := 0, 0, "", ""
	for {
		list, err := s.Client.DemoV1alpha1().Widgets("pages").List(ctx, metav1.ListOptions{Limit: page, Continue: continueToken})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		got += len(list.Items)
		if firstRV == "" {
			firstRV = list.ResourceVersion
		} else if list.ResourceVersion != firstRV {
			t.Errorf("page %d at RV %s, want the first page's %s", pages, list.ResourceVersion, firstRV)
		}
		if continueToken = list.Continue; continueToken == "" {
			break
		}
	}
	if got != widgets || pages != 3 {
		t.Fatalf("paginated list: %d widgets in %d pages, want %d in 3", got, pages, widgets)
	}
	exact, err := s.Client.DemoV1alpha1().Widgets("pages").List(ctx, metav1.ListOptions{
		ResourceVersion: firstRV, ResourceVersionMatch: metav1.ResourceVersionMatchExact,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(exact.Items) != widgets || exact.ResourceVersion != firstRV {
		t.Fatalf("exact-RV list at %s: %d widgets at RV %s", firstRV, len(exact.Items), exact.ResourceVersion)
	}
	after := etcdLists()
	t.Logf("a %d-page list of %d widgets and an exact-RV list at %s: etcd list requests %v -> %v", pages, widgets, firstRV, before, after)
	if after != before {
		t.Errorf("%v etcd list requests for lists the snapshots cover, want 0", after-before)
	}
}
