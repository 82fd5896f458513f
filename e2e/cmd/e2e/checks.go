package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	"k8s.io/utils/ptr"

	"github.com/watchkeeper/watchkeeper/e2e/internal/kubecluster"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/v1alpha1"
	clientset "github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/generated/clientset/versioned"
	demov1alpha1 "github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/generated/clientset/versioned/typed/demo/v1alpha1"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/generated/informers/externalversions"
)

const ns = "default"

// writeSampleKubeconfig gets a token of the sample apiserver's service
// account (TokenRequest, signed with the service-account key) and writes
// the kubeconfig the sample runs with: what deploy/rbac.yaml grants it is
// all it may do.
func (c *cluster) writeSampleKubeconfig(ctx context.Context) (string, error) {
	out, err := c.kubectl(ctx, c.adminKubeconfig, "-n", sampleNamespace, "create", "token", sampleService, "--duration=24h")
	if err != nil {
		return "", err
	}
	caData, err := os.ReadFile(c.pki.Path("ca.crt"))
	if err != nil {
		return "", err
	}
	c.sampleKubeconfig = filepath.Join(c.dir, "sample-apiserver.kubeconfig")
	user := "system:serviceaccount:" + sampleNamespace + ":" + sampleService
	if err := kubecluster.WriteKubeconfig(c.sampleKubeconfig, c.kasURL, caData, &clientcmdapi.AuthInfo{Token: strings.TrimSpace(out)}, user); err != nil {
		return "", err
	}
	return "kubectl -n " + sampleNamespace + " create token " + sampleService + ": " + user, nil
}

// registerService points deploy/apiservice.yaml at the sample apiserver on
// loopback. kube-apiserver refuses an EndpointSlice (or Endpoints) to
// 127.0.0.1, which this step shows with a server-side dry run; an
// ExternalName Service 127.0.0.1 is accepted, and the APIService's port is
// the sample's.
func (c *cluster) registerService(ctx context.Context) (string, error) {
	kube, err := kubernetes.NewForConfig(c.admin)
	if err != nil {
		return "", err
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: sampleService, Namespace: sampleNamespace, Labels: map[string]string{discoveryv1.LabelServiceName: sampleService}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"127.0.0.1"}}},
		Ports:       []discoveryv1.EndpointPort{{Port: ptr.To(int32(c.samplePort))}},
	}
	_, err = kube.DiscoveryV1().EndpointSlices(sampleNamespace).Create(ctx, slice, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	refused := "accepted"
	if apierrors.IsInvalid(err) {
		refused = "refused (" + err.(apierrors.APIStatus).Status().Details.Causes[0].Message + ")"
	} else if err != nil {
		return "", fmt.Errorf("dry-run EndpointSlice: %w", err)
	}
	if _, err := c.kubectl(ctx, c.adminKubeconfig, "-n", sampleNamespace, "create", "service", "externalname", sampleService, "--external-name=127.0.0.1"); err != nil {
		return "", err
	}
	if _, err := c.kubectl(ctx, c.adminKubeconfig, "apply", "-f", filepath.Join(c.cfg.deployDir, "apiservice.yaml")); err != nil {
		return "", err
	}
	patch := fmt.Sprintf(`{"spec":{"service":{"port":%d}}}`, c.samplePort)
	if _, err := c.kubectl(ctx, c.adminKubeconfig, "patch", "apiservice", apiServiceName, "--type=merge", "-p", patch); err != nil {
		return "", err
	}
	return fmt.Sprintf("EndpointSlice to 127.0.0.1 %s; Service %s/%s ExternalName 127.0.0.1; APIService %s port %d",
		refused, sampleNamespace, sampleService, apiServiceName, c.samplePort), nil
}

// checks are issue 14's checks, through kube-apiserver only.
func (c *cluster) checks(ctx context.Context, r *kubecluster.Report) {
	cs, err := clientset.NewForConfig(c.admin)
	if err != nil {
		r.Step("clients", func() (string, error) { return "", err })
		return
	}
	widgets := cs.DemoV1alpha1().Widgets(ns)

	r.Step("APIService Available", func() (string, error) {
		took, reason, err := c.waitAvailable(ctx, true, 90*time.Second)
		return fmt.Sprintf("Available=True (%s) %v after it was applied", reason, took.Round(100*time.Millisecond)), err
	})
	r.Step("kubectl api-resources lists widgets and gadgets", func() (string, error) {
		out, err := c.kubectl(ctx, c.adminKubeconfig, "api-resources", "--api-group=demo.watchkeeper.io", "--no-headers")
		if err != nil {
			return "", err
		}
		var names []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(l); len(f) > 0 {
				names = append(names, f[0])
			}
		}
		if !slices.Contains(names, "widgets") || !slices.Contains(names, "gadgets") {
			return "", fmt.Errorf("got %v", names)
		}
		return strings.Join(names, ", "), nil
	})
	c.crudChecks(ctx, r, widgets)
	c.watchChecks(ctx, r, cs, widgets)
	c.authChecks(ctx, r)
	c.killRestartChecks(ctx, r, widgets)
}

func (c *cluster) writeFile(name, content string) (string, error) {
	path := filepath.Join(c.dir, name)
	return path, os.WriteFile(path, []byte(content), 0o644)
}

// crudChecks: create, get, chunked list, patch, server-side apply, delete,
// with kubectl (the chunked list with client-go too).
func (c *cluster) crudChecks(ctx context.Context, r *kubecluster.Report, widgets demov1alpha1.WidgetInterface) {
	kc := c.adminKubeconfig
	r.Step("kubectl create widget", func() (string, error) {
		path, err := c.writeFile("widget.yaml", "apiVersion: demo.watchkeeper.io/v1alpha1\nkind: Widget\nmetadata:\n  name: demo\n  labels: {app: demo}\nspec:\n  size: 3\n  nodeName: node-1\n")
		if err != nil {
			return "", err
		}
		out, err := c.kubectl(ctx, kc, "create", "-f", path)
		return kubecluster.OneLine(out), err
	})
	r.Step("kubectl get widget", func() (string, error) {
		out, err := c.kubectl(ctx, kc, "get", "widget", "demo", "-o", "jsonpath={.spec.size} {.spec.color} {.metadata.resourceVersion}")
		if err != nil {
			return "", err
		}
		f := strings.Fields(out)
		if len(f) != 3 || f[0] != "3" || f[1] != "blue" {
			return "", fmt.Errorf("size color rv = %q, want 3 blue (defaulted) and an RV", out)
		}
		return fmt.Sprintf("size=%s color=%s (defaulted) resourceVersion=%s", f[0], f[1], f[2]), nil
	})
	r.Step("list in chunks (kubectl --chunk-size=5, client-go limit=5)", func() (string, error) {
		for i := range 11 {
			w := &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("chunk-%02d", i)}, Spec: v1alpha1.WidgetSpec{Size: int32(i + 1)}}
			if _, err := widgets.Create(ctx, w, metav1.CreateOptions{}); err != nil {
				return "", err
			}
		}
		out, err := c.kubectl(ctx, kc, "get", "widgets", "--chunk-size=5", "--no-headers", "-v=6")
		if err != nil {
			return "", err
		}
		rows, requests := 0, 0
		for _, l := range strings.Split(out, "\n") {
			switch {
			// GET .../widgets?limit=5, then ?continue=...&limit=5
			case strings.Contains(l, "/widgets?") && strings.Contains(l, "limit=5") && strings.Contains(l, "200 OK"):
				requests++
			case strings.HasPrefix(l, "demo ") || strings.HasPrefix(l, "chunk-"):
				rows++
			}
		}
		var pages []int
		cont := ""
		for {
			l, err := widgets.List(ctx, metav1.ListOptions{Limit: 5, Continue: cont})
			if err != nil {
				return "", err
			}
			pages = append(pages, len(l.Items))
			if cont = l.Continue; cont == "" {
				break
			}
		}
		if rows != 12 || requests != 3 || !slices.Equal(pages, []int{5, 5, 2}) {
			return "", fmt.Errorf("kubectl: %d rows in %d requests, client-go pages %v; want 12 rows in 3 requests, pages [5 5 2]", rows, requests, pages)
		}
		return fmt.Sprintf("kubectl: 12 rows in 3 GETs ?limit=5&continue=...; client-go pages %v", pages), nil
	})
	r.Step("kubectl patch widget", func() (string, error) {
		if _, err := c.kubectl(ctx, kc, "patch", "widget", "demo", "--type=merge", "-p", `{"spec":{"size":5}}`); err != nil {
			return "", err
		}
		w, err := widgets.Get(ctx, "demo", metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		if w.Spec.Size != 5 {
			return "", fmt.Errorf("size %d after the patch, want 5", w.Spec.Size)
		}
		return "size 3 -> 5, resourceVersion " + w.ResourceVersion, nil
	})
	r.Step("kubectl apply --server-side widget", func() (string, error) {
		apply := func(size int) error {
			path, err := c.writeFile("widget-ssa.yaml", fmt.Sprintf("apiVersion: demo.watchkeeper.io/v1alpha1\nkind: Widget\nmetadata:\n  name: applied\nspec:\n  size: %d\n  color: red\n", size))
			if err != nil {
				return err
			}
			_, err = c.kubectl(ctx, kc, "apply", "--server-side", "--field-manager=e2e-ssa", "-f", path)
			return err
		}
		if err := apply(7); err != nil {
			return "", err
		}
		if err := apply(9); err != nil {
			return "", err
		}
		w, err := widgets.Get(ctx, "applied", metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		var managers []string
		for _, m := range w.ManagedFields {
			managers = append(managers, m.Manager+"/"+string(m.Operation))
		}
		if w.Spec.Size != 9 || w.Spec.Color != v1alpha1.WidgetColor("red") || !slices.Contains(managers, "e2e-ssa/Apply") {
			return "", fmt.Errorf("size %d color %s managers %v; want 9 red with e2e-ssa/Apply", w.Spec.Size, w.Spec.Color, managers)
		}
		return fmt.Sprintf("created then updated (size 7 -> 9), managedFields %v", managers), nil
	})
	r.Step("kubectl delete widget", func() (string, error) {
		out, err := c.kubectl(ctx, kc, "delete", "widget", "demo")
		if err != nil {
			return "", err
		}
		if _, err := widgets.Get(ctx, "demo", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return "", fmt.Errorf("get after delete: %v, want 404", err)
		}
		return kubecluster.OneLine(out) + "; get: 404 NotFound", nil
	})
}

type seen struct {
	typ  watch.EventType
	name string
	rv   string
}

func (s seen) String() string { return fmt.Sprintf("%s %s@%s", s.typ, s.name, s.rv) }

// collect reads w until n non-bookmark events came or timeout passed.
func collect(w watch.Interface, n int, timeout time.Duration) []seen {
	var got []seen
	deadline := time.After(timeout)
	for len(got) < n {
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				return got
			}
			if e.Type == watch.Bookmark {
				continue
			}
			if e.Type == watch.Error {
				got = append(got, seen{e.Type, fmt.Sprint(apierrors.FromObject(e.Object)), ""})
				continue
			}
			o := e.Object.(*v1alpha1.Widget)
			got = append(got, seen{e.Type, o.Name, o.ResourceVersion})
		case <-deadline:
			return got
		}
	}
	return got
}

// writes does a fixed series of writes of widgets named prefix-*: it
// returns each event a watch must see, with the RV the server answered
// (for a delete, the RV of the deleted object as the DELETED event carries it).
// listThenWatch lists the widgets and watches them from the list's RV, as
// a reflector does, with bookmarks if asked.
func listThenWatch(ctx context.Context, widgets demov1alpha1.WidgetInterface, bookmarks bool) (*v1alpha1.WidgetList, watch.Interface, error) {
	l, err := widgets.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	w, err := widgets.Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion, AllowWatchBookmarks: bookmarks})
	if err != nil {
		return nil, nil, err
	}
	return l, w, nil
}

func writes(ctx context.Context, widgets demov1alpha1.WidgetInterface, prefix string, n int) ([]seen, error) {
	var want []seen
	for i := range n {
		name := fmt.Sprintf("%s-%d", prefix, i)
		var (
			w   *v1alpha1.Widget
			err error
			typ watch.EventType
		)
		switch i % 3 {
		case 0:
			typ = watch.Added
			w, err = widgets.Create(ctx, &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.WidgetSpec{Size: 1}}, metav1.CreateOptions{})
		case 1:
			typ, name = watch.Modified, fmt.Sprintf("%s-%d", prefix, i-1)
			w, err = widgets.Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"size":2}}`), metav1.PatchOptions{})
		case 2:
			// Delete answers a Status without the deletion's RV: a DELETED
			// event is matched by its name alone (see sameEvents).
			typ, name = watch.Deleted, fmt.Sprintf("%s-%d", prefix, i-2)
			err = widgets.Delete(ctx, name, metav1.DeleteOptions{})
			w = &v1alpha1.Widget{}
		}
		if err != nil {
			return want, fmt.Errorf("write %d (%s %s): %w", i, typ, name, err)
		}
		want = append(want, seen{typ, name, w.ResourceVersion})
	}
	return want, nil
}

// sameEvents compares the events a watch got with the writes; a want
// without an RV (a deletion) matches any RV.
func sameEvents(got, want []seen) error {
	masked := slices.Clone(got)
	for i := range masked {
		if i < len(want) && want[i].rv == "" {
			masked[i].rv = ""
		}
	}
	if slices.Equal(masked, want) {
		return nil
	}
	return fmt.Errorf("got %d events %v, want %d %v", len(got), got, len(want), want)
}

// watchChecks: a watch from an RV, bookmarks through the proxy, a
// WatchList informer.
func (c *cluster) watchChecks(ctx context.Context, r *kubecluster.Report, cs *clientset.Clientset, widgets demov1alpha1.WidgetInterface) {
	r.Step("watch from an RV receives every change", func() (string, error) {
		l, w, err := listThenWatch(ctx, widgets, false)
		if err != nil {
			return "", err
		}
		defer w.Stop()
		want, err := writes(ctx, widgets, "watched", 12)
		if err != nil {
			return "", err
		}
		got := collect(w, len(want), 20*time.Second)
		if err := sameEvents(got, want); err != nil {
			return "", err
		}
		return fmt.Sprintf("from RV %s: %d of %d events (ADDED, MODIFIED, DELETED), in order, RVs %s..%s", l.ResourceVersion, len(got), len(want), got[0].rv, got[len(got)-1].rv), nil
	})
	r.Step("bookmarks through the proxy at the configured frequency", func() (string, error) {
		freq := c.cfg.bookmarkFrequency
		_, w, err := listThenWatch(ctx, widgets, true)
		if err != nil {
			return "", err
		}
		defer w.Stop()
		start := time.Now()
		var at []time.Duration
		deadline := time.After(5*freq + freq/2)
	read:
		for {
			select {
			case e, ok := <-w.ResultChan():
				if !ok {
					break read
				}
				if e.Type == watch.Bookmark {
					at = append(at, time.Since(start))
				}
			case <-deadline:
				break read
			}
		}
		var gaps []time.Duration
		for i := 1; i < len(at); i++ {
			gaps = append(gaps, (at[i] - at[i-1]).Round(10*time.Millisecond))
		}
		figure := fmt.Sprintf("%d bookmarks in %v with --watch-cache-bookmark-frequency=%v, first after %v, gaps %v", len(at), 5*freq+freq/2, freq, roundOr0(at), gaps)
		if len(gaps) < 3 {
			return "", errors.New(figure + ": want at least 4")
		}
		sorted := slices.Clone(gaps)
		slices.Sort(sorted)
		if med := sorted[len(sorted)/2]; med < freq/2 || med > 2*freq {
			return "", fmt.Errorf("%s: median gap %v, want within [%v, %v]", figure, med, freq/2, 2*freq)
		}
		return figure, nil
	})
	r.Step("client-go informer with WatchList syncs without a LIST", func() (string, error) {
		// The watches of the steps before are closed; wait until the
		// server has seen them go, so the count below is this informer's.
		var before metrics
		for i := 0; ; i++ {
			var err error
			if before, err = c.sampleMetrics(ctx); err != nil {
				return "", err
			}
			if before.openWatches == 0 || i == 50 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		factory := externalversions.NewSharedInformerFactory(cs, 0)
		inf := factory.Demo().V1alpha1().Widgets().Informer()
		stop := make(chan struct{})
		defer func() { close(stop); factory.Shutdown() }()
		factory.Start(stop)
		syncCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if !cache.WaitForCacheSync(syncCtx.Done(), inf.HasSynced) {
			return "", errors.New("informer did not sync in 30s")
		}
		during, err := c.sampleMetrics(ctx)
		if err != nil {
			return "", err
		}
		l, err := widgets.List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", err
		}
		// The control: the plain list just made counts as one (the server
		// counts a request once its handler returned: allow it a moment).
		var after metrics
		for i := 0; ; i++ {
			if after, err = c.sampleMetrics(ctx); err != nil {
				return "", err
			}
			if after.lists > during.lists || i == 20 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		n := len(inf.GetStore().List())
		lists := during.lists - before.lists
		figure := fmt.Sprintf("synced %d widgets (a list has %d); on the sample apiserver's /metrics: LIST widgets +%v (+%v after one plain list), open WATCHes of widgets %v -> %v",
			n, len(l.Items), lists, after.lists-during.lists, before.openWatches, during.openWatches)
		if lists != 0 || after.lists-during.lists != 1 || during.openWatches <= before.openWatches || n != len(l.Items) {
			return "", errors.New(figure + "; want LIST +0 (+1 after the list), one more WATCH and the list's count")
		}
		return figure, nil
	})
}

func roundOr0(at []time.Duration) time.Duration {
	if len(at) == 0 {
		return 0
	}
	return at[0].Round(10 * time.Millisecond)
}

// metrics are the sample apiserver's counts for widgets.
type metrics struct {
	lists       float64 // apiserver_request_total{verb="LIST",resource="widgets"}
	openWatches float64 // apiserver_longrunning_requests{verb="WATCH",resource="widgets"}
}

// sampleMetrics reads the sample apiserver's /metrics directly, as the
// aggregator's identity would (front-proxy cert, system:masters).
func (c *cluster) sampleMetrics(ctx context.Context) (metrics, error) {
	hc, err := rest.HTTPClientFor(c.frontProxyConfig("e2e-driver", "system:masters"))
	if err != nil {
		return metrics{}, err
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.sampleURL()+"/metrics", nil)
	resp, err := hc.Do(req)
	if err != nil {
		return metrics{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return metrics{}, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	var m metrics
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `resource="widgets"`) || !strings.Contains(line, `subresource=""`) {
			continue
		}
		var dst *float64
		switch {
		case strings.HasPrefix(line, "apiserver_request_total{") && strings.Contains(line, `verb="LIST"`):
			dst = &m.lists
		case strings.HasPrefix(line, "apiserver_longrunning_requests{") && strings.Contains(line, `verb="WATCH"`):
			dst = &m.openWatches
		default:
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return m, fmt.Errorf("metric line %q: %w", line, err)
		}
		*dst += v
	}
	return m, sc.Err()
}

// authChecks: RBAC get-only, unauthenticated, a request that bypasses the
// aggregator.
func (c *cluster) authChecks(ctx context.Context, r *kubecluster.Report) {
	r.Step("RBAC get-only user: get 200, list 403, watch 403", func() (string, error) {
		kc := c.adminKubeconfig
		if _, err := c.kubectl(ctx, kc, "-n", ns, "create", "role", "widget-getter", "--verb=get", "--resource=widgets.demo.watchkeeper.io"); err != nil {
			return "", err
		}
		if _, err := c.kubectl(ctx, kc, "-n", ns, "create", "rolebinding", "widget-getter", "--role=widget-getter", "--user="+kubecluster.GetterUser); err != nil {
			return "", err
		}
		getterCfg, err := clientcmd.BuildConfigFromFlags("", c.getterKubeconfig)
		if err != nil {
			return "", err
		}
		getter := clientset.NewForConfigOrDie(getterCfg).DemoV1alpha1().Widgets(ns)
		// RBAC reaches the authorizers' caches within moments.
		var getErr error
		for range 50 {
			if _, getErr = getter.Get(ctx, "applied", metav1.GetOptions{}); getErr == nil {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if getErr != nil {
			return "", fmt.Errorf("get as %s: %w", kubecluster.GetterUser, getErr)
		}
		out, listErr := c.kubectl(ctx, c.getterKubeconfig, "get", "widgets")
		if listErr == nil || !strings.Contains(out, "Forbidden") {
			return "", fmt.Errorf("kubectl get widgets as %s: %v %q, want Forbidden", kubecluster.GetterUser, listErr, out)
		}
		w, watchErr := getter.Watch(ctx, metav1.ListOptions{})
		if watchErr == nil {
			w.Stop()
		}
		if !apierrors.IsForbidden(watchErr) {
			return "", fmt.Errorf("watch as %s: %v, want 403", kubecluster.GetterUser, watchErr)
		}
		return fmt.Sprintf("%s: get 200; list: %s; watch: 403", kubecluster.GetterUser, kubecluster.OneLine(out)), nil
	})
	r.Step("unauthenticated request 401", func() (string, error) {
		caData, err := os.ReadFile(c.pki.Path("ca.crt"))
		if err != nil {
			return "", err
		}
		hc, err := rest.HTTPClientFor(&rest.Config{Host: c.kasURL, TLSClientConfig: rest.TLSClientConfig{CAData: caData}})
		if err != nil {
			return "", err
		}
		path := c.kasURL + "/apis/demo.watchkeeper.io/v1alpha1/namespaces/default/widgets"
		bad, err := status(ctx, hc, path, map[string]string{"Authorization": "Bearer not-a-token"})
		if err != nil {
			return "", err
		}
		anon, err := status(ctx, hc, path, nil)
		if err != nil {
			return "", err
		}
		figure := fmt.Sprintf("bad bearer token: %d; no credentials: %d (system:anonymous, kube-apiserver's --anonymous-auth default)", bad, anon)
		if bad != http.StatusUnauthorized || anon != http.StatusForbidden {
			return "", errors.New(figure + "; want 401 and 403")
		}
		return figure, nil
	})
	r.Step("the sample apiserver rejects a request that bypasses the aggregator", func() (string, error) {
		path := c.sampleURL() + "/apis/demo.watchkeeper.io/v1alpha1/namespaces/default/widgets"
		hdr := map[string]string{"X-Remote-User": kubecluster.AdminUser, "X-Remote-Group": "system:masters"}
		direct, err := status(ctx, &http.Client{Transport: &http.Transport{TLSClientConfig: insecureTLS}, Timeout: 10 * time.Second}, path, hdr)
		if err != nil {
			return "", err
		}
		hc, err := rest.HTTPClientFor(c.frontProxyConfig(kubecluster.AdminUser, "system:masters"))
		if err != nil {
			return "", err
		}
		proxied, err := status(ctx, hc, path, nil)
		if err != nil {
			return "", err
		}
		figure := fmt.Sprintf("X-Remote-User/X-Remote-Group without the front-proxy client cert: %d; with it: %d", direct, proxied)
		if (direct != http.StatusUnauthorized && direct != http.StatusForbidden) || proxied != http.StatusOK {
			return "", errors.New(figure + "; want 401 or 403, and 200")
		}
		return figure, nil
	})
}

func status(ctx context.Context, hc *http.Client, url string, hdr map[string]string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// waitAvailable waits for the APIService's Available condition to be want
// and returns how long it took and the condition's reason.
func (c *cluster) waitAvailable(ctx context.Context, want bool, timeout time.Duration) (time.Duration, string, error) {
	ac, err := aggregator.NewForConfig(c.admin)
	if err != nil {
		return 0, "", err
	}
	start := time.Now()
	wantStatus := apiregv1.ConditionFalse
	if want {
		wantStatus = apiregv1.ConditionTrue
	}
	last := "no condition"
	for {
		svc, err := ac.ApiregistrationV1().APIServices().Get(ctx, apiServiceName, metav1.GetOptions{})
		if err != nil {
			return 0, "", err
		}
		for _, cond := range svc.Status.Conditions {
			if cond.Type == apiregv1.Available {
				if cond.Status == wantStatus {
					return time.Since(start), cond.Reason, nil
				}
				last = fmt.Sprintf("%s %s: %s", cond.Status, cond.Reason, cond.Message)
			}
		}
		if time.Since(start) > timeout {
			return time.Since(start), "", fmt.Errorf("condition Available not %s after %v: %s", wantStatus, timeout, last)
		}
		select {
		case <-ctx.Done():
			return 0, "", ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// killRestartChecks: kill the sample apiserver (SIGKILL), see the
// APIService go unavailable and requests get 503; restart it, see it
// available again, and resume a watch from its last bookmark's RV.
func (c *cluster) killRestartChecks(ctx context.Context, r *kubecluster.Report, widgets demov1alpha1.WidgetInterface) {
	var (
		bookmarkRV string
		want       []seen
	)
	ok := r.Step("before the kill: a watch's bookmark after writes", func() (string, error) {
		_, w, err := listThenWatch(ctx, widgets, true)
		if err != nil {
			return "", err
		}
		defer w.Stop()
		// Ending with a create, whose RV the server answers: a bookmark at
		// or after it follows every write before.
		before, err := writes(ctx, widgets, "before", 4)
		if err != nil {
			return "", err
		}
		last, _ := strconv.ParseUint(before[len(before)-1].rv, 10, 64)
		timeout := time.After(5 * c.cfg.bookmarkFrequency)
		for bookmarkRV == "" {
			select {
			case e, ok := <-w.ResultChan():
				if !ok {
					return "", errors.New("watch ended")
				}
				if e.Type != watch.Bookmark {
					continue
				}
				rv := e.Object.(*v1alpha1.Widget).ResourceVersion
				if n, _ := strconv.ParseUint(rv, 10, 64); n >= last {
					bookmarkRV = rv
				}
			case <-timeout:
				return "", fmt.Errorf("no bookmark at or after RV %d in %v", last, 5*c.cfg.bookmarkFrequency)
			}
		}
		// Writes after the bookmark, just before the kill: the resumed
		// watch owes them.
		if want, err = writes(ctx, widgets, "after-bookmark", 3); err != nil {
			return "", err
		}
		return fmt.Sprintf("bookmark at RV %s after writes up to RV %d; then %d more writes (create, patch, delete)", bookmarkRV, last, len(want)), nil
	})
	if !ok {
		return
	}
	r.Step("kill -9 the sample apiserver: APIService unavailable", func() (string, error) {
		pid := c.sample.PID()
		c.sample.Kill()
		took, reason, err := c.waitAvailable(ctx, false, 90*time.Second)
		return fmt.Sprintf("pid %d killed; Available=False (%s) after %v", pid, reason, took.Round(100*time.Millisecond)), err
	})
	r.Step("requests while it is down get 503", func() (string, error) {
		_, err := widgets.List(ctx, metav1.ListOptions{})
		if !apierrors.IsServiceUnavailable(err) {
			return "", fmt.Errorf("list widgets: %v, want 503", err)
		}
		out, kerr := c.kubectl(ctx, c.adminKubeconfig, "get", "widgets")
		if kerr == nil {
			return "", fmt.Errorf("kubectl get widgets succeeded: %s", out)
		}
		return fmt.Sprintf("client-go list: 503 %q; kubectl: %s", err.Error(), lastLine(out)), nil
	})
	r.Step("restart: APIService available again", func() (string, error) {
		start := time.Now()
		if err := c.startSample(ctx); err != nil {
			return "", err
		}
		ready := time.Since(start)
		took, reason, err := c.waitAvailable(ctx, true, 90*time.Second)
		return fmt.Sprintf("sample ready in %v (pid %d); Available=True (%s) %v later", ready.Round(100*time.Millisecond), c.sample.PID(), reason, took.Round(100*time.Millisecond)), err
	})
	r.Step("a watch resumed from the last bookmark's RV loses nothing", func() (string, error) {
		after, err := writes(ctx, widgets, "after-restart", 3)
		if err != nil {
			return "", err
		}
		all := append(slices.Clone(want), after...)
		w, err := widgets.Watch(ctx, metav1.ListOptions{ResourceVersion: bookmarkRV, AllowWatchBookmarks: true})
		if err != nil {
			return "", err
		}
		defer w.Stop()
		got := collect(w, len(all), 20*time.Second)
		if err := sameEvents(got, all); err != nil {
			return "", err
		}
		return fmt.Sprintf("from RV %s: %d of %d events (%d written before the kill, %d after the restart), in order, none twice", bookmarkRV, len(got), len(all), len(want), len(after)), nil
	})
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
