package integration

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchkeeper/watchkeeper/internal/testchild"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/v1alpha1"
)

// The same server serves with either cache, or none, for side-by-side
// measurements, and the flag decides which: each run checks what only its
// choice does.
//   - watchkeeper: /debug/watchkeeper lists the widgets cache.
//   - upstream: a watch cache receives the widgets' events from etcd
//     (apiserver_watch_cache_events_received_total grows), and the debug view
//     lists no cache: it is not watchkeeper's.
//   - none: no cache receives an event, and the debug view lists no cache.
//
// The counter is process-wide (legacyregistry): the test reads its growth
// across one server's life, so it runs in a process of its own, where no
// other sample server writes widgets.
func TestSampleServerDecoratorSwitch(t *testing.T) {
	t.Parallel() // in a process of its own: it reads the process-wide metrics
	if !testchild.Isolate(t) {
		return
	}
	for _, d := range []string{"watchkeeper", "upstream", "none"} {
		t.Run(d, func(t *testing.T) {
			received := map[string]string{"group": "demo.watchkeeper.io", "resource": "widgets"}
			before, _ := metricValue(t, "apiserver_watch_cache_events_received_total", received)

			s := startSampleServer(t, "--watch-cache-decorator="+d)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			w := &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: "default"}, Spec: v1alpha1.WidgetSpec{Size: 2}}
			created, err := s.Client.DemoV1alpha1().Widgets("default").Create(ctx, w, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			watcher, err := s.Client.DemoV1alpha1().Widgets("default").Watch(ctx, metav1.ListOptions{ResourceVersion: created.ResourceVersion})
			if err != nil {
				t.Fatal(err)
			}
			defer watcher.Stop()
			created.Spec.Size = 4
			if _, err := s.Client.DemoV1alpha1().Widgets("default").Update(ctx, created, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			select {
			case ev := <-watcher.ResultChan():
				if got := ev.Object.(*v1alpha1.Widget).Spec.Size; got != 4 {
					t.Fatalf("event %s with size %d, want the update to 4", ev.Type, got)
				}
			case <-ctx.Done():
				t.Fatal("no event for the update")
			}

			// The watch has had the update: a cache serving it has received
			// it (and the create) from etcd by now.
			after, _ := metricValue(t, "apiserver_watch_cache_events_received_total", received)
			cached := after - before
			listed := debugViewResources(ctx, t, s)
			t.Logf("--watch-cache-decorator=%s: %v events received by a watch cache; caches in %s: %v", d, cached, byDebugPath, listed)
			switch d {
			case "watchkeeper":
				if !slices.Contains(listed, "widgets") {
					t.Errorf("%s lists %v, want the widgets cache: watchkeeper is not serving widgets", byDebugPath, listed)
				}
				if cached < 2 {
					t.Errorf("a watch cache received %v widget events, want the create and the update", cached)
				}
			case "upstream":
				if len(listed) > 0 {
					t.Errorf("%s lists %v, want no cache: watchkeeper serves instead of upstream's cache", byDebugPath, listed)
				}
				if cached < 2 {
					t.Errorf("a watch cache received %v widget events, want the create and the update: no cache serves widgets", cached)
				}
			case "none":
				if len(listed) > 0 {
					t.Errorf("%s lists %v, want no cache", byDebugPath, listed)
				}
				if cached != 0 {
					t.Errorf("a watch cache received %v widget events, want none: widgets are cached", cached)
				}
			}
		})
	}
}

// debugViewResources lists the resources the server's watchkeeper debug view
// shows (none when it is not served).
func debugViewResources(ctx context.Context, t *testing.T, s *sampleServer) []string {
	t.Helper()
	resp := ssDo(ctx, t, s, s.Admin, byDebugPath, url.Values{"format": {"json"}})
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusNotFound {
		return nil
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s?format=json: %d %s", byDebugPath, resp.StatusCode, body)
	}
	var page struct {
		Resources []struct {
			Resource string `json:"resource"`
		} `json:"resources"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		t.Fatalf("decoding %s: %v", body, err)
	}
	var out []string
	for _, r := range page.Resources {
		out = append(out, r.Resource)
	}
	return out
}
