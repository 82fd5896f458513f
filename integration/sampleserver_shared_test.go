package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/v1alpha1"
)

// Many watches of the same objects are encoded at once by the apiserver;
// under -race this fails if they share the cached objects.
func TestSampleServerConcurrentWatchesOfSameObjects(t *testing.T) {
	s := startSampleServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	widgets := s.Client.DemoV1alpha1().Widgets("shared")
	list, err := widgets.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const watchers, objects = 4, 20
	var ws []watch.Interface
	for range watchers {
		w, err := widgets.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		ws = append(ws, w)
	}
	for i := range objects {
		w := &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("w-%02d", i)}, Spec: v1alpha1.WidgetSpec{Size: 1}}
		if _, err := widgets.Create(ctx, w, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < objects; n++ {
				select {
				case ev, ok := <-w.ResultChan():
					if !ok || ev.Type != watch.Added {
						t.Errorf("watcher %d: event %d is %v (open %v), want ADDED", i, n, ev.Type, ok)
						return
					}
				case <-ctx.Done():
					t.Errorf("watcher %d: %d of %d events", i, n, objects)
					return
				}
			}
		}()
	}
	wg.Wait()
}
