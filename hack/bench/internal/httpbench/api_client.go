package httpbench

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clientset "github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/generated/clientset/versioned"
)

const (
	// benchNamespace holds every widget of a run; standalone mode has no
	// namespace lifecycle admission, so it needs no Namespace object.
	benchNamespace = "bench"
	widgetsPath    = "/apis/demo.watchkeeper.io/v1alpha1/namespaces/" + benchNamespace + "/widgets"
)

// typedClient is the generated clientset, for the few writes and lists a
// scenario makes; the many watches go through watch_client.go instead.
func (s *serverProcess) typedClient() (*clientset.Clientset, error) {
	return clientset.NewForConfig(s.Admin)
}

// clientAtWidgetsRV is typedClient and the widgets' current resourceVersion,
// where a scenario's watches start.
func (s *serverProcess) clientAtWidgetsRV(ctx context.Context) (*clientset.Clientset, string, error) {
	cs, err := s.typedClient()
	if err != nil {
		return nil, "", err
	}
	rv, err := currentWidgetsRV(ctx, cs)
	return cs, rv, err
}

// currentWidgetsRV is the resourceVersion of a consistent list of the
// (empty) widgets: a watch from it starts with no initial events.
func currentWidgetsRV(ctx context.Context, cs clientset.Interface) (string, error) {
	l, err := cs.DemoV1alpha1().Widgets(benchNamespace).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return "", fmt.Errorf("listing widgets for the current resourceVersion: %w", err)
	}
	if l.ResourceVersion == "" {
		return "", fmt.Errorf("list of widgets has no resourceVersion")
	}
	return l.ResourceVersion, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
