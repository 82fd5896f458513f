package integration

import (
	"context"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/v1alpha1"
)

// The standalone server serves the demo group through watchkeeper, on TLS,
// to the admin token only.
func TestSampleServerServesAndAuthenticates(t *testing.T) {
	s := startSampleServer(t, "--watch-cache-bookmark-frequency=2s", "--watch-cache-bookmark-pre-deadline-offset=1s")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	w := &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w1", Namespace: "default"}, Spec: v1alpha1.WidgetSpec{Size: 3}}
	created, err := s.Client.DemoV1alpha1().Widgets("default").Create(ctx, w, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Client.DemoV1alpha1().Widgets("default").Get(ctx, "w1", metav1.GetOptions{ResourceVersion: created.ResourceVersion})
	if err != nil || got.UID != created.UID {
		t.Fatalf("get from cache = %v, %v", got, err)
	}

	for path, want := range map[string]int{
		"/readyz":  http.StatusOK,
		"/livez":   http.StatusOK,
		"/healthz": http.StatusOK,
		"/apis/demo.watchkeeper.io/v1alpha1/widgets": http.StatusUnauthorized,
		"/apis": http.StatusUnauthorized,
	} {
		if code := statusOf(t, s, path); code != want {
			t.Errorf("anonymous GET %s = %d, want %d", path, code, want)
		}
	}
}

func statusOf(t *testing.T, s *sampleServer, path string) int {
	t.Helper()
	tr, err := rest.TransportFor(s.Anonymous)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(s.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
