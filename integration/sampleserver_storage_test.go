package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchkeeper/watchkeeper/internal/etcdtest"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/v1alpha1"
)

// Standalone state lives in the data directory: objects, token and
// kubeconfig survive a restart, and credentials are not world-readable.
func TestSampleServerDataDirSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	first := startSampleServer(t, "--data-dir="+dir)
	g := &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: "kept"}, Spec: v1alpha1.GadgetSpec{Owner: "team-a"}}
	created, err := first.Client.DemoV1alpha1().Gadgets().Create(ctx, g, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"admin-token", "admin.kubeconfig"} {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if mode := info.Mode().Perm(); mode != 0o600 {
			t.Errorf("%s has mode %o, want 600", name, mode)
		}
	}
	token, _ := os.ReadFile(filepath.Join(dir, "admin-token"))
	first.Stop()

	second := startSampleServer(t, "--data-dir="+dir)
	got, err := second.Client.DemoV1alpha1().Gadgets().Get(ctx, "kept", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("after a restart: %v", err)
	}
	if got.UID != created.UID {
		t.Errorf("after a restart got UID %s, want %s", got.UID, created.UID)
	}
	if again, _ := os.ReadFile(filepath.Join(dir, "admin-token")); string(again) != string(token) {
		t.Error("the admin token changed across a restart")
	}
}

// With --etcd-servers the server stores in that etcd and starts none.
func TestSampleServerExternalEtcd(t *testing.T) {
	etcd := etcdtest.Start(t)
	dir := t.TempDir()
	s := startSampleServer(t, "--data-dir="+dir, "--etcd-servers="+etcd.Endpoints()[0])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "ext", Namespace: "default"}, Spec: v1alpha1.WidgetSpec{Size: 1}}
	if _, err := s.Client.DemoV1alpha1().Widgets("default").Create(ctx, w, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	resp, err := etcd.Client().Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, kv := range resp.Kvs {
		found = found || strings.HasSuffix(string(kv.Key), "/widgets/default/ext")
	}
	if !found {
		t.Fatalf("widget not in the external etcd (%d keys under /registry/)", len(resp.Kvs))
	}
	if _, err := os.Stat(filepath.Join(dir, "etcd")); !os.IsNotExist(err) {
		t.Errorf("an embedded etcd was started as well (stat: %v)", err)
	}
}
