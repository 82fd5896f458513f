package integration

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/v1alpha1"
)

// A replica told to stop ends its watches after the grace period, each
// cleanly (the stream closes, no error), so the server stops in seconds
// instead of waiting out the HTTP server's 60s shutdown timeout, and each
// client can resume from its last RV elsewhere (issue 11).
func TestSampleServerStopEndsWatchesPromptly(t *testing.T) {
	const watches = 20
	s := startSampleServer(t, "--shutdown-watch-termination-grace-period=1s")
	ctx, cancel := context.WithTimeout(context.Background(), ssTestDeadline)
	defer cancel()
	list, err := s.Client.DemoV1alpha1().Widgets("stop").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ws []watch.Interface
	for range watches {
		w, err := s.Client.DemoV1alpha1().Widgets("stop").Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		ws = append(ws, w)
	}
	created, err := s.Client.DemoV1alpha1().Widgets("stop").Create(ctx, ssWidget("stop", "w"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range ws {
		ev := bhNext(t, w, 10*time.Second)
		if got, ok := ev.Object.(*v1alpha1.Widget); !ok || ev.Type != watch.Added || got.ResourceVersion != created.ResourceVersion {
			t.Fatalf("watch %d: got %s, want ADDED at %s", i, ssDescribe(ev.Event), created.ResourceVersion)
		}
	}

	start := time.Now()
	s.Stop()
	took := time.Since(start)
	t.Logf("stopped with %d open watches in %v", watches, took.Round(time.Millisecond))
	// Without ending its watches the server waits on them for its HTTP
	// shutdown (30.5s seen here); 15s is far above a 1s grace on a loaded
	// machine and far below that.
	if took > 15*time.Second {
		t.Errorf("stopping took %v with open watches, want seconds: the watches were not ended", took)
	}
	for i, w := range ws {
		select {
		case ev, ok := <-w.ResultChan():
			if ok {
				t.Errorf("watch %d: %s after the stop, want the stream closed", i, ssDescribe(ev))
			}
		case <-time.After(10 * time.Second):
			t.Errorf("watch %d still open after the server stopped", i)
		}
	}
}
