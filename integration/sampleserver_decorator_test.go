package integration

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/v1alpha1"
)

// The same server serves with either cache, or none, for side-by-side
// measurements.
func TestSampleServerDecoratorSwitch(t *testing.T) {
	for _, d := range []string{"watchkeeper", "upstream", "none"} {
		t.Run(d, func(t *testing.T) {
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
		})
	}
}
