package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spf13/pflag"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	kubescheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"

	"github.com/watchkeeper/watchkeeper/internal/etcdtest"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/v1alpha1"
	clientset "github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/generated/clientset/versioned"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/server"
)

// The sample apiserver in aggregated mode (--kubeconfig set): delegated
// authentication (TokenReview) and authorization (SubjectAccessReview)
// against a fake core Kubernetes API, storage in a real etcd.
//
// Helpers here carry an agg prefix.

const (
	aggAdminToken  = "admin-token"  // alice: may do anything
	aggGetterToken = "getter-token" // bob: may only get widgets

	aggAuthConfigMap = "extension-apiserver-authentication"
	aggConfigMapRV   = "1"
)

func TestSampleServerAggregated(t *testing.T) {
	etcd := etcdtest.Start(t)
	core := aggStartFakeCoreAPI(t)
	s := aggStartSampleServer(t,
		"--kubeconfig="+core.kubeconfig,
		"--etcd-servers="+strings.Join(etcd.Endpoints(), ","),
		"--enable-priority-and-fairness=false",
		// Every default admission plugin needs informers of the core API.
		"--disable-admission-plugins=NamespaceLifecycle,MutatingAdmissionPolicy,MutatingAdmissionWebhook,ValidatingAdmissionPolicy,ValidatingAdmissionWebhook",
	)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// 1. /readyz is 200 (aggStartSampleServer waited for it, anonymously).
	if code := s.status(t, "", "/readyz"); code != http.StatusOK {
		t.Fatalf("anonymous GET /readyz = %d, want 200", code)
	}

	alice := s.client(t, aggAdminToken)
	bob := s.client(t, aggGetterToken)
	const ns = "default"

	// 2. alice lists, watches, creates: the watch sees the creation.
	list, err := alice.DemoV1alpha1().Widgets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("alice: list widgets: %v", err)
	}
	w, err := alice.DemoV1alpha1().Widgets(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatalf("alice: watch widgets: %v", err)
	}
	defer w.Stop()
	created, err := alice.DemoV1alpha1().Widgets(ns).Create(ctx,
		&v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w1", Namespace: ns}, Spec: v1alpha1.WidgetSpec{Size: 3}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("alice: create widget: %v", err)
	}
	aggWaitForAdded(t, w, created)
	list, err = alice.DemoV1alpha1().Widgets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("alice: list widgets: %v", err)
	}
	if len(list.Items) != 1 || list.Items[0].UID != created.UID {
		t.Errorf("alice: list after create = %v, want only w1 (uid %s)", list.Items, created.UID)
	}

	// 3. bob may get, not list nor watch.
	got, err := bob.DemoV1alpha1().Widgets(ns).Get(ctx, "w1", metav1.GetOptions{})
	if err != nil {
		t.Errorf("bob: get widget: %v", err)
	} else if got.UID != created.UID {
		t.Errorf("bob: get widget: uid %s, want %s", got.UID, created.UID)
	}
	if _, err := bob.DemoV1alpha1().Widgets(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("bob: list widgets: err = %v, want 403 Forbidden", err)
	}
	if bw, err := bob.DemoV1alpha1().Widgets(ns).Watch(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		if err == nil {
			bw.Stop()
		}
		t.Errorf("bob: watch widgets: err = %v, want 403 Forbidden", err)
	}
	if _, err := bob.DemoV1alpha1().Widgets(ns).Create(ctx,
		&v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w2", Namespace: ns}, Spec: v1alpha1.WidgetSpec{Size: 3}},
		metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("bob: create widget: err = %v, want 403 Forbidden", err)
	}

	// 4. An unknown token is not authenticated: 401, not anonymous.
	unknown := s.client(t, "no-such-token")
	if _, err := unknown.DemoV1alpha1().Widgets(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
		t.Errorf("unknown token: list widgets: err = %v, want 401 Unauthorized", err)
	}
	if code := s.status(t, "no-such-token", "/apis"); code != http.StatusUnauthorized {
		t.Errorf("unknown token: GET /apis = %d, want 401", code)
	}
	// Anonymous: authenticated as system:anonymous, then denied by the
	// delegated authorizer.
	if code := s.status(t, "", ssWidgetsPath(ns)); code != http.StatusForbidden {
		t.Errorf("anonymous: GET %s = %d, want 403", ssWidgetsPath(ns), code)
	}

	// 5. The delegation went through the fake core API.
	reviewed := core.reviewedTokens()
	t.Logf("TokenReviews: %d, for %v", core.tokenReviews.Load(), reviewed)
	for _, tok := range []string{aggAdminToken, aggGetterToken, "no-such-token"} {
		if !slices.Contains(reviewed, tok) {
			t.Errorf("no TokenReview for token %q", tok)
		}
	}
	sars := core.sarLog()
	t.Logf("SubjectAccessReviews: %d:\n  %s", core.sars.Load(), strings.Join(sars, "\n  "))
	for _, want := range []string{
		"alice list demo.watchkeeper.io/widgets ns=default: allowed",
		"alice watch demo.watchkeeper.io/widgets ns=default: allowed",
		"alice create demo.watchkeeper.io/widgets ns=default: allowed",
		"bob get demo.watchkeeper.io/widgets ns=default name=w1: allowed",
		"bob list demo.watchkeeper.io/widgets ns=default: denied",
		"bob watch demo.watchkeeper.io/widgets ns=default: denied",
		"bob create demo.watchkeeper.io/widgets ns=default: denied",
		"system:anonymous list demo.watchkeeper.io/widgets ns=default: denied",
	} {
		if !slices.Contains(sars, want) {
			t.Errorf("no SubjectAccessReview %q", want)
		}
	}
	if n := core.tokenReviews.Load(); n < 3 {
		t.Errorf("TokenReviews = %d, want at least 3", n)
	}
	if n := core.sars.Load(); n < 8 {
		t.Errorf("SubjectAccessReviews = %d, want at least 8", n)
	}
	if u := core.unexpectedRequests(); len(u) > 0 {
		t.Logf("requests the fake core API answered 404: %v", u)
	}
	t.Logf("requests the fake core API received:\n  %s", strings.Join(core.requestLog(), "\n  "))
}

func aggWaitForAdded(t *testing.T, w watch.Interface, want *v1alpha1.Widget) {
	t.Helper()
	timeout := time.After(15 * time.Second)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("alice: watch closed before the ADDED of %s", want.Name)
			}
			if ev.Type == watch.Error {
				t.Fatalf("alice: watch error: %v", apierrors.FromObject(ev.Object))
			}
			if got, ok := ev.Object.(*v1alpha1.Widget); ok && ev.Type == watch.Added && got.UID == want.UID {
				return
			}
			t.Logf("alice: watch event %s %T, waiting for ADDED %s", ev.Type, ev.Object, want.Name)
		case <-timeout:
			t.Fatalf("alice: no ADDED event for %s within 15s", want.Name)
		}
	}
}

// aggServer is the sample apiserver running aggregated in this process.
type aggServer struct {
	URL    string
	CAFile string
}

// aggStartSampleServer is startSampleServer for aggregated mode, which
// writes no admin kubeconfig: it parses args as the binary would, on a
// free loopback port and temporary directories, and waits for /readyz.
func aggStartSampleServer(t *testing.T, args ...string) *aggServer {
	t.Helper()
	port := freeLoopbackPort(t)
	certDir := t.TempDir()
	o := server.NewOptions()
	fs := pflag.NewFlagSet("sample-apiserver", pflag.ContinueOnError)
	for _, f := range o.Flags().FlagSets {
		fs.AddFlagSet(f)
	}
	all := append([]string{
		"--data-dir=" + etcdtest.DataDir(t),
		"--secure-port=" + strconv.Itoa(port),
		"--bind-address=127.0.0.1",
		// Aggregated mode keeps the self-signed certificate in --cert-dir,
		// by default relative to the working directory.
		"--cert-dir=" + certDir,
	}, args...)
	if err := fs.Parse(all); err != nil {
		t.Fatalf("parsing %v: %v", all, err)
	}
	o.Complete()
	if o.Standalone() {
		t.Fatalf("options %v: standalone, want aggregated", all)
	}
	if errs := o.Validate(); len(errs) > 0 {
		t.Fatalf("options %v: %v", all, errs)
	}
	s := newInProcessServer(t, o)
	if s.KubeconfigPath != "" {
		t.Errorf("aggregated server wrote an admin kubeconfig %s", s.KubeconfigPath)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Generic.PrepareRun().RunWithContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("sample apiserver: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Errorf("sample apiserver did not stop within 60s")
		}
		s.Close()
	})

	as := &aggServer{URL: s.URL, CAFile: filepath.Join(certDir, "apiserver.crt")}
	var (
		code int
		body string
		last error
	)
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		select {
		case err := <-done:
			return false, fmt.Errorf("sample apiserver stopped before it was ready: %v", err)
		default:
		}
		code, body, last = as.get(t, "", "/readyz?verbose")
		return last == nil && code == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("sample apiserver not ready after 60s: %v; last /readyz: %d %v\n%s", err, code, last, body)
	}
	return as
}

// config is a client config that trusts the server's self-signed
// certificate and carries token, if any.
func (s *aggServer) config(token string) *rest.Config {
	return &rest.Config{
		Host:            s.URL,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: s.CAFile},
		QPS:             -1,
	}
}

func (s *aggServer) client(t *testing.T, token string) clientset.Interface {
	t.Helper()
	c, err := clientset.NewForConfig(s.config(token))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (s *aggServer) get(t *testing.T, token, path string) (int, string, error) {
	t.Helper()
	tr, err := rest.TransportFor(s.config(token))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get(s.URL + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

func (s *aggServer) status(t *testing.T, token, path string) int {
	t.Helper()
	code, _, err := s.get(t, token, path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return code
}

// aggFakeCoreAPI is just enough of a core Kubernetes API for delegated
// authentication and authorization: the configmap
// kube-system/extension-apiserver-authentication (get, list, watch),
// TokenReviews and SubjectAccessReviews. Anything else is logged and
// answered 404.
type aggFakeCoreAPI struct {
	t          *testing.T
	srv        *httptest.Server
	kubeconfig string
	authCM     *corev1.ConfigMap
	// done ends the watches when the test ends.
	done chan struct{}

	tokenReviews, sars atomic.Int64

	mu         sync.Mutex
	requests   []string
	tokens     []string
	sarLines   []string
	unexpected []string
}

func aggStartFakeCoreAPI(t *testing.T) *aggFakeCoreAPI {
	t.Helper()
	// The client CA and the request-header CA the kube-apiserver would
	// publish; nobody holds a key signed by them here.
	caPEM, _, err := certutil.GenerateSelfSignedCertKey("fake-client-ca", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := &aggFakeCoreAPI{
		t:    t,
		done: make(chan struct{}),
		authCM: &corev1.ConfigMap{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{
				Name: aggAuthConfigMap, Namespace: metav1.NamespaceSystem,
				UID: "6a1ef1b4-2c0c-4d4e-9d7e-000000000001", ResourceVersion: aggConfigMapRV,
				CreationTimestamp: metav1.Now(),
			},
			Data: map[string]string{
				"client-ca-file":                     string(caPEM),
				"requestheader-client-ca-file":       string(caPEM),
				"requestheader-allowed-names":        `["front-proxy-client"]`,
				"requestheader-username-headers":     `["X-Remote-User"]`,
				"requestheader-group-headers":        `["X-Remote-Group"]`,
				"requestheader-extra-headers-prefix": `["X-Remote-Extra-"]`,
				"requestheader-uid-headers":          `["X-Remote-Uid"]`,
			},
		},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/namespaces/kube-system/configmaps/{name}", f.getConfigMap)
	mux.HandleFunc("GET /api/v1/namespaces/kube-system/configmaps", f.listOrWatchConfigMaps)
	mux.HandleFunc("POST /apis/authentication.k8s.io/v1/tokenreviews", f.tokenReview)
	mux.HandleFunc("POST /apis/authorization.k8s.io/v1/subjectaccessreviews", f.subjectAccessReview)
	mux.HandleFunc("/", f.notFound)
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.requests = append(f.requests, r.Method+" "+r.URL.RequestURI())
		f.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	// Registered before the sample server starts, so it runs after the
	// sample server stopped.
	t.Cleanup(func() {
		close(f.done)
		f.srv.Close()
	})

	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["core"] = &clientcmdapi.Cluster{Server: f.srv.URL}
	cfg.AuthInfos["sample-apiserver"] = &clientcmdapi.AuthInfo{Token: "sample-apiserver-token"}
	cfg.Contexts["core"] = &clientcmdapi.Context{Cluster: "core", AuthInfo: "sample-apiserver"}
	cfg.CurrentContext = "core"
	f.kubeconfig = filepath.Join(t.TempDir(), "core.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, f.kubeconfig); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *aggFakeCoreAPI) getConfigMap(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("name") != aggAuthConfigMap {
		f.writeStatus(w, apierrors.NewNotFound(corev1.Resource("configmaps"), r.PathValue("name")))
		return
	}
	f.writeJSON(w, http.StatusOK, f.authCM)
}

func (f *aggFakeCoreAPI) listOrWatchConfigMaps(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	sel := fields.Everything()
	if s := q.Get("fieldSelector"); s != "" {
		var err error
		if sel, err = fields.ParseSelector(s); err != nil {
			f.writeStatus(w, apierrors.NewBadRequest(err.Error()))
			return
		}
	}
	var items []corev1.ConfigMap
	if sel.Matches(fields.Set{"metadata.name": f.authCM.Name, "metadata.namespace": f.authCM.Namespace}) {
		items = append(items, *f.authCM)
	}
	if w1 := q.Get("watch"); w1 != "true" && w1 != "1" {
		f.writeJSON(w, http.StatusOK, &corev1.ConfigMapList{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMapList"},
			ListMeta: metav1.ListMeta{ResourceVersion: aggConfigMapRV},
			Items:    items,
		})
		return
	}

	// A watch: nothing ever changes. A WatchList (sendInitialEvents=true,
	// client-go's default since 1.35) first gets the state and the
	// initial-events-end bookmark, as from a kube-apiserver.
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	send := func(typ watch.EventType, obj runtime.Object) {
		raw, err := json.Marshal(obj)
		if err == nil {
			err = enc.Encode(&metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: raw}})
		}
		if err != nil {
			f.t.Logf("fake core API: writing a watch event: %v", err)
		}
	}
	if q.Get("sendInitialEvents") == "true" {
		for i := range items {
			send(watch.Added, &items[i])
		}
		send(watch.Bookmark, &corev1.ConfigMap{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{
				ResourceVersion: aggConfigMapRV,
				Annotations:     map[string]string{metav1.InitialEventsAnnotationKey: "true"},
			},
		})
	}
	w.(http.Flusher).Flush()
	timeout := 10 * time.Minute
	if s, err := strconv.Atoi(q.Get("timeoutSeconds")); err == nil {
		timeout = time.Duration(s) * time.Second
	}
	select {
	case <-r.Context().Done():
	case <-f.done:
	case <-time.After(timeout):
	}
}

func (f *aggFakeCoreAPI) tokenReview(w http.ResponseWriter, r *http.Request) {
	f.tokenReviews.Add(1)
	tr := &authnv1.TokenReview{}
	if !f.decode(w, r, tr) {
		return
	}
	f.mu.Lock()
	f.tokens = append(f.tokens, tr.Spec.Token)
	f.mu.Unlock()
	tr.TypeMeta = metav1.TypeMeta{APIVersion: "authentication.k8s.io/v1", Kind: "TokenReview"}
	tr.Status = authnv1.TokenReviewStatus{Audiences: tr.Spec.Audiences}
	switch tr.Spec.Token {
	case aggAdminToken:
		tr.Status.Authenticated = true
		tr.Status.User = authnv1.UserInfo{Username: "alice", UID: "alice-uid", Groups: []string{"system:authenticated"}}
	case aggGetterToken:
		tr.Status.Authenticated = true
		tr.Status.User = authnv1.UserInfo{Username: "bob", UID: "bob-uid", Groups: []string{"system:authenticated"}}
	default:
		tr.Status.Error = "unknown token"
	}
	tr.Spec.Token = "" // as a kube-apiserver does not echo it either
	f.writeJSON(w, http.StatusCreated, tr)
}

func (f *aggFakeCoreAPI) subjectAccessReview(w http.ResponseWriter, r *http.Request) {
	f.sars.Add(1)
	sar := &authzv1.SubjectAccessReview{}
	if !f.decode(w, r, sar) {
		return
	}
	allowed, reason := aggAuthorize(sar.Spec)
	line := aggDescribeSAR(sar.Spec)
	if allowed {
		line += ": allowed"
	} else {
		line += ": denied"
	}
	f.mu.Lock()
	f.sarLines = append(f.sarLines, line)
	f.mu.Unlock()
	sar.TypeMeta = metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SubjectAccessReview"}
	sar.Status = authzv1.SubjectAccessReviewStatus{Allowed: allowed, Reason: reason}
	f.writeJSON(w, http.StatusCreated, sar)
}

// aggAuthorize is the fake cluster's policy: alice may do anything, bob
// may get widgets, nobody else anything.
func aggAuthorize(spec authzv1.SubjectAccessReviewSpec) (bool, string) {
	switch spec.User {
	case "alice":
		return true, "alice may do anything"
	case "bob":
		if ra := spec.ResourceAttributes; ra != nil && ra.Verb == "get" &&
			ra.Group == demo.GroupName && ra.Resource == "widgets" && ra.Subresource == "" {
			return true, "bob may get widgets"
		}
		return false, "bob may only get widgets"
	}
	return false, "no rule for " + spec.User
}

func aggDescribeSAR(spec authzv1.SubjectAccessReviewSpec) string {
	if ra := spec.ResourceAttributes; ra != nil {
		s := fmt.Sprintf("%s %s %s/%s", spec.User, ra.Verb, ra.Group, ra.Resource)
		if ra.Subresource != "" {
			s += "/" + ra.Subresource
		}
		if ra.Namespace != "" {
			s += " ns=" + ra.Namespace
		}
		if ra.Name != "" {
			s += " name=" + ra.Name
		}
		return s
	}
	if nra := spec.NonResourceAttributes; nra != nil {
		return fmt.Sprintf("%s %s %s", spec.User, nra.Verb, nra.Path)
	}
	return spec.User + " (no attributes)"
}

func (f *aggFakeCoreAPI) notFound(w http.ResponseWriter, r *http.Request) {
	req := r.Method + " " + r.URL.RequestURI()
	f.t.Logf("fake core API: unexpected request %s: 404", req)
	f.mu.Lock()
	f.unexpected = append(f.unexpected, req)
	f.mu.Unlock()
	f.writeStatus(w, apierrors.NewNotFound(corev1.Resource("unknown"), r.URL.Path))
}

// decode reads a request body the way a kube-apiserver would: JSON or
// protobuf, by its Content-Type.
func (f *aggFakeCoreAPI) decode(w http.ResponseWriter, r *http.Request, into runtime.Object) bool {
	body, err := io.ReadAll(r.Body)
	if err == nil {
		_, _, err = kubescheme.Codecs.UniversalDeserializer().Decode(body, nil, into)
	}
	if err != nil {
		f.t.Logf("fake core API: %s %s: decoding a %T: %v", r.Method, r.URL.Path, into, err)
		f.writeStatus(w, apierrors.NewBadRequest(err.Error()))
		return false
	}
	return true
}

func (f *aggFakeCoreAPI) writeJSON(w http.ResponseWriter, code int, obj any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	if err := json.NewEncoder(w).Encode(obj); err != nil {
		f.t.Logf("fake core API: writing a response: %v", err)
	}
}

func (f *aggFakeCoreAPI) writeStatus(w http.ResponseWriter, err *apierrors.StatusError) {
	st := err.Status()
	st.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}
	f.writeJSON(w, int(st.Code), &st)
}

func (f *aggFakeCoreAPI) requestLog() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests)
}

func (f *aggFakeCoreAPI) reviewedTokens() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.tokens)
}

func (f *aggFakeCoreAPI) sarLog() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.sarLines)
}

func (f *aggFakeCoreAPI) unexpectedRequests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.unexpected)
}
