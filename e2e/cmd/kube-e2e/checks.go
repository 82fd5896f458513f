package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/watchkeeper/watchkeeper/e2e/internal/kubecluster"
	"github.com/watchkeeper/watchkeeper/internal/netfault"
)

// The resources the checks' servers leave uncached: events by
// kube-apiserver's default (--watch-cache-sizes events#0, in both groups),
// configmaps by the flag the checks give.
var uncachedByFlags = sets.New(
	schema.GroupResource{Resource: "events"},
	schema.GroupResource{Group: "events.k8s.io", Resource: "events"},
	schema.GroupResource{Resource: "configmaps"},
)

// The checks' custom resource.
var widgets = schema.GroupVersionResource{Group: "kube-e2e.watchkeeper.io", Version: "v1", Resource: "widgets"}

func runChecks(ctx context.Context, run *runDir, cfg config, r *kubecluster.Report) {
	r.Step("help: watchkeeper's flag section beside kube-apiserver's", func() (string, error) {
		return checkHelp(ctx, cfg.kubeAPIServer)
	})
	args := []string{"--watch-cache-sizes=configmaps#0", "--watch-cache-storage-silence-timeout=3s",
		// The custom resource that checkCRD creates, before its CRD exists.
		"--watch-cache-resource-overrides=" + widgets.Resource + "." + widgets.Group + ":bookmark-frequency=7s"}
	var wk, up *kubecluster.Server
	defer func() {
		for _, s := range []*kubecluster.Server{wk, up} {
			if s != nil {
				s.Stop()
			}
		}
	}()
	if !r.Step("setup: kube-apiserver on watchkeeper ready", func() (string, error) {
		var err error
		start := time.Now()
		wk, err = kubecluster.StartServer(ctx, run.dir, run.pki, kubecluster.ServerConfig{Name: "kas-watchkeeper", Binary: cfg.kubeAPIServer, Decorator: "watchkeeper", ViaProxy: true, Args: args})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s, pid %d, %s, etcd through a proxy, ready in %v", wk.URL, wk.KAS.PID(), strings.Join(args, " "), time.Since(start).Round(100*time.Millisecond)), nil
	}) || !r.Step("setup: the same binary with --watch-cache-decorator=upstream ready", func() (string, error) {
		var err error
		start := time.Now()
		up, err = kubecluster.StartServer(ctx, run.dir, run.pki, kubecluster.ServerConfig{Name: "kas-upstream", Binary: cfg.kubeAPIServer, Decorator: "upstream", Args: args})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s, pid %d, ready in %v", up.URL, up.KAS.PID(), time.Since(start).Round(100*time.Millisecond)), nil
	}) {
		return
	}
	r.Step("readyz: a watch-caches check on both", func() (string, error) {
		for _, s := range []*kubecluster.Server{wk, up} {
			code, body, err := s.Get(ctx, "/readyz?verbose")
			if err != nil {
				return "", err
			}
			if code != http.StatusOK || !strings.Contains(body, "[+]watch-caches ok") {
				return "", fmt.Errorf("%s: /readyz?verbose %d without [+]watch-caches ok:\n%s", s.Name, code, body)
			}
		}
		return "/readyz?verbose: [+]watch-caches ok", nil
	})
	r.Step("caches: watchkeeper serves every resource the stock cache serves, and no other", func() (string, error) {
		return checkCaches(ctx, wk, up)
	})
	r.Step("metrics: upstream's apiserver_watch_cache_* series, for every cache", func() (string, error) {
		return checkMetrics(ctx, wk, up)
	})
	r.Step("sharded: a list and a watch with a shard selector get exactly their shard, on both caches", func() (string, error) {
		return checkSharded(ctx, wk, up)
	})
	r.Step("crd: a custom resource is cached by watchkeeper, and watched", func() (string, error) {
		return checkCRD(ctx, wk)
	})
	r.Step("uncached: configmaps (--watch-cache-sizes=configmaps#0) are watched straight from etcd", func() (string, error) {
		return checkUncachedWatch(ctx, wk)
	})
	r.Step("readyz: fails while the caches are not synced, passes once they are", func() (string, error) {
		return checkReadyzFollowsCaches(ctx, wk)
	})
	r.Step("shutdown: a SIGTERM with open watches stops watchkeeper's server in seconds", func() (string, error) {
		took, n, err := stopWithWatches(ctx, wk)
		if err != nil {
			return "", err
		}
		if took > 20*time.Second {
			return "", fmt.Errorf("stopped %v after SIGTERM with %d open watches, want seconds", took.Round(100*time.Millisecond), n)
		}
		return fmt.Sprintf("exited %v after SIGTERM, %d watches open, each closed", took.Round(100*time.Millisecond), n), nil
	})
	if cfg.stockShutdown {
		r.Step("shutdown: the same with the stock cache, for comparison", func() (string, error) {
			took, n, err := stopWithWatches(ctx, up)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("exited %v after SIGTERM, %d watches open", took.Round(100*time.Millisecond), n), nil
		})
	}
}

// checkHelp reads --help: kube-apiserver's sections, then watchkeeper's.
func checkHelp(ctx context.Context, binary string) (string, error) {
	out, err := exec.CommandContext(ctx, binary, "--help").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("--help: %w: %s", err, out)
	}
	help := string(out)
	var sections []string
	inWatchkeeper, flags := false, 0
	for _, line := range strings.Split(help, "\n") {
		if strings.HasSuffix(line, " flags:") && !strings.HasPrefix(line, " ") {
			sections = append(sections, strings.TrimSuffix(line, " flags:"))
			inWatchkeeper = line == "Watch cache (watchkeeper) flags:"
			continue
		}
		if inWatchkeeper && strings.HasPrefix(strings.TrimSpace(line), "--") {
			flags++
		}
	}
	for _, want := range []string{"Etcd", "Watch cache (watchkeeper)"} {
		if !slices.Contains(sections, want) {
			return "", fmt.Errorf("--help has no %q section; sections: %v", want, sections)
		}
	}
	for _, want := range []string{"--watch-cache[", "--watch-cache-sizes", "--shutdown-watch-termination-grace-period",
		"--watch-cache-bookmark-frequency", "--watch-cache-events-history-window", "--watch-cache-decorator"} {
		if !strings.Contains(help, want) {
			return "", fmt.Errorf("--help lacks %s", want)
		}
	}
	return fmt.Sprintf("%d sections (%s); %d flags in watchkeeper's", len(sections), strings.Join(sections, ", "), flags), nil
}

// debugCaches lists the caches /debug/watchkeeper shows.
func debugCaches(ctx context.Context, s *kubecluster.Server) (sets.Set[schema.GroupResource], error) {
	return debugSchedules(ctx, s, nil)
}

// debugSchedules is debugCaches, noting each cache's bookmark frequency in
// frequencies when it is not nil.
func debugSchedules(ctx context.Context, s *kubecluster.Server, frequencies map[schema.GroupResource]time.Duration) (sets.Set[schema.GroupResource], error) {
	code, body, err := s.Get(ctx, "/debug/watchkeeper?format=json")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("%s: /debug/watchkeeper: %d %s", s.Name, code, body)
	}
	var page struct {
		Resources []struct {
			Group, Resource string
			Ready           bool
			Schedule        struct {
				BookmarkFrequency float64 `json:"bookmarkFrequencySeconds"`
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &page); err != nil {
		return nil, err
	}
	out := sets.New[schema.GroupResource]()
	for _, r := range page.Resources {
		gr := schema.GroupResource{Group: r.Group, Resource: r.Resource}
		out.Insert(gr)
		if frequencies != nil {
			frequencies[gr] = time.Duration(r.Schedule.BookmarkFrequency * float64(time.Second))
		}
	}
	return out, nil
}

// stockCaches lists the resources the stock cache serves: those with a
// cache initialization counted.
func stockCaches(ctx context.Context, s *kubecluster.Server) (sets.Set[schema.GroupResource], error) {
	samples, err := s.Metrics(ctx, "apiserver_watch_cache_initializations_total")
	if err != nil {
		return nil, err
	}
	out := sets.New[schema.GroupResource]()
	for gr := range kubecluster.ResourcesOf(samples)["apiserver_watch_cache_initializations_total"] {
		out.Insert(gr)
	}
	return out, nil
}

// watchable lists the server's resources that take a watch, subresources
// aside.
func watchable(s *kubecluster.Server) (sets.Set[schema.GroupResource], error) {
	_, lists, err := s.Client.Discovery().ServerGroupsAndResources()
	if err != nil {
		return nil, err
	}
	out := sets.New[schema.GroupResource]()
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			return nil, err
		}
		for _, res := range l.APIResources {
			if !strings.Contains(res.Name, "/") && slices.Contains(res.Verbs, "watch") {
				out.Insert(schema.GroupResource{Group: gv.Group, Resource: res.Name})
			}
		}
	}
	return out, nil
}

func formatGRs(s sets.Set[schema.GroupResource]) string {
	var names []string
	for gr := range s {
		names = append(names, gr.String())
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

func checkCaches(ctx context.Context, wk, up *kubecluster.Server) (string, error) {
	ours, err := debugCaches(ctx, wk)
	if err != nil {
		return "", err
	}
	stock, err := stockCaches(ctx, up)
	if err != nil {
		return "", err
	}
	if onUpstream, err := debugCaches(ctx, up); err != nil || onUpstream.Len() != 0 {
		return "", fmt.Errorf("with --watch-cache-decorator=upstream, /debug/watchkeeper lists %v (%v), want none", formatGRs(onUpstream), err)
	}
	if missing := stock.Difference(ours); missing.Len() > 0 {
		return "", fmt.Errorf("the stock cache serves %s, watchkeeper does not", formatGRs(missing))
	}
	if extra := ours.Difference(stock); extra.Len() > 0 {
		return "", fmt.Errorf("watchkeeper caches %s, which the stock server leaves uncached", formatGRs(extra))
	}
	all, err := watchable(wk)
	if err != nil {
		return "", err
	}
	uncached := all.Difference(ours)
	if !uncached.Equal(uncachedByFlags) {
		return "", fmt.Errorf("uncached: %s; want exactly %s", formatGRs(uncached), formatGRs(uncachedByFlags))
	}
	for _, gr := range []schema.GroupResource{
		{Resource: "pods"}, {Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"},
		{Group: "apiregistration.k8s.io", Resource: "apiservices"}, {Group: "coordination.k8s.io", Resource: "leases"},
	} {
		if !ours.Has(gr) {
			return "", fmt.Errorf("%s not cached by watchkeeper", gr)
		}
	}
	return fmt.Sprintf("%d caches on each, the same resources (CRDs and APIServices among them); uncached on both: %s", ours.Len(), formatGRs(uncached)), nil
}

// checkMetrics compares the watch cache series of both servers: every
// family the stock cache exports (apiserver_watch_cache_*, and upstream's
// watch_cache_capacity, which has no apiserver_ prefix) is exported by
// watchkeeper's server, for every resource the stock one has it for; the
// families every cache has from its start cover every cache; the uncached
// resources have none.
func checkMetrics(ctx context.Context, wk, up *kubecluster.Server) (string, error) {
	prefixes := []string{"apiserver_watch_cache_", "watch_cache_"}
	ws, err := wk.Metrics(ctx, prefixes...)
	if err != nil {
		return "", err
	}
	us, err := up.Metrics(ctx, prefixes...)
	if err != nil {
		return "", err
	}
	ours, stock := kubecluster.ResourcesOf(ws), kubecluster.ResourcesOf(us)
	caches, err := debugCaches(ctx, wk)
	if err != nil {
		return "", err
	}
	var problems, families []string
	for f, grs := range stock {
		families = append(families, f)
		for gr := range grs {
			if !ours[f][gr] {
				problems = append(problems, fmt.Sprintf("%s{%s}: on the stock cache, not on watchkeeper", f, gr))
			}
		}
	}
	slices.Sort(families)
	perCache := []string{"apiserver_watch_cache_initializations_total", "apiserver_watch_cache_initialization_duration_seconds",
		"apiserver_watch_cache_resource_version", "watch_cache_capacity"}
	for _, f := range perCache {
		if len(stock[f]) != caches.Len() {
			problems = append(problems, fmt.Sprintf("%s: the stock cache has it for %d resources, not all %d", f, len(stock[f]), caches.Len()))
		}
		for gr := range caches {
			if !ours[f][gr] {
				problems = append(problems, fmt.Sprintf("%s{%s}: missing", f, gr))
			}
		}
	}
	for gr := range uncachedByFlags {
		for f, grs := range ours {
			if grs[gr] {
				problems = append(problems, fmt.Sprintf("%s{%s}: a series for an uncached resource", f, gr))
			}
		}
	}
	slices.Sort(problems)
	if len(problems) > 0 {
		if len(problems) > 12 {
			problems = append(problems[:12], fmt.Sprintf("... %d more", len(problems)-12))
		}
		return "", errors.New(strings.Join(problems, "; "))
	}
	return fmt.Sprintf("the stock cache's %d families (%s) on watchkeeper too, for the same resources; %d caches each with %s",
		len(families), strings.Join(families, ", "), caches.Len(), strings.Join(perCache, ", ")), nil
}

// checkCRD creates a CRD and one of its objects, watches the object's
// resource, and finds its cache in the debug view and /metrics.
func checkCRD(ctx context.Context, s *kubecluster.Server) (string, error) {
	ext, err := apiextensionsclient.NewForConfig(s.Admin)
	if err != nil {
		return "", err
	}
	preserve := true
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: widgets.Resource + "." + widgets.Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: widgets.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: widgets.Resource, Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: widgets.Version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: &preserve,
				}},
			}},
		},
	}
	if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		got, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		if established(got) {
			break
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("CRD %s not Established after a minute", crd.Name)
		}
		time.Sleep(200 * time.Millisecond)
	}
	dyn, err := dynamic.NewForConfig(s.Admin)
	if err != nil {
		return "", err
	}
	res := dyn.Resource(widgets).Namespace("default")
	var list *unstructured.UnstructuredList
	for {
		// The first requests after Established may find the resource's
		// handler not installed yet.
		if list, err = res.List(ctx, metav1.ListOptions{}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("listing %s: %w", widgets.Resource, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	w, err := res.Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
	if err != nil {
		return "", err
	}
	defer w.Stop()
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": widgets.GroupVersion().String(), "kind": "Widget",
		"metadata": map[string]any{"name": "w1"}, "spec": map[string]any{"size": 1},
	}}
	created, err := res.Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	if err := nextIs(w, watch.Added, created.GetResourceVersion()); err != nil {
		return "", err
	}
	frequencies := map[schema.GroupResource]time.Duration{}
	caches, err := debugSchedules(ctx, s, frequencies)
	if err != nil {
		return "", err
	}
	gr := widgets.GroupResource()
	if !caches.Has(gr) {
		return "", fmt.Errorf("/debug/watchkeeper does not list %s: %s", gr, formatGRs(caches))
	}
	// The override named the resource before its CRD existed: it was
	// logged at start-up, not refused, and applies to the cache now.
	pods := schema.GroupResource{Resource: "pods"}
	if frequencies[gr] != 7*time.Second || frequencies[pods] != time.Minute {
		return "", fmt.Errorf("bookmark frequency %v for %s (overridden to 7s), %v for pods (default 1m)", frequencies[gr], gr, frequencies[pods])
	}
	if !logHas(s.KAS, "A watch cache override names no built-in cached resource") {
		return "", fmt.Errorf("no start-up line about the override of %s in %s", gr, s.KAS.LogPath)
	}
	samples, err := s.Metrics(ctx, "apiserver_watch_cache_initializations_total")
	if err != nil {
		return "", err
	}
	if !kubecluster.ResourcesOf(samples)["apiserver_watch_cache_initializations_total"][gr] {
		return "", fmt.Errorf("no apiserver_watch_cache_initializations_total for %s", gr)
	}
	return fmt.Sprintf("%s: ADDED %s@%s on a watch; in /debug/watchkeeper and /metrics; bookmarks every 7s, as --watch-cache-resource-overrides said before the CRD existed",
		gr, created.GetName(), created.GetResourceVersion()), nil
}

// logHas reports whether the child's log holds text.
func logHas(ch *kubecluster.Child, text string) bool {
	data, err := os.ReadFile(ch.LogPath)
	return err == nil && strings.Contains(string(data), text)
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}

// nextIs reads w's next event, which must be typ at rv.
func nextIs(w watch.Interface, typ watch.EventType, rv string) error {
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			return errors.New("watch closed")
		}
		m, err := metaOf(ev)
		if err != nil {
			return err
		}
		if ev.Type != typ || m.GetResourceVersion() != rv {
			return fmt.Errorf("got %s %s@%s, want %s @%s", ev.Type, m.GetName(), m.GetResourceVersion(), typ, rv)
		}
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("no %s @%s within 30s", typ, rv)
	}
}

func metaOf(ev watch.Event) (metav1.Object, error) {
	m, ok := ev.Object.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("event %s carries %T", ev.Type, ev.Object)
	}
	return m, nil
}

func checkUncachedWatch(ctx context.Context, s *kubecluster.Server) (string, error) {
	cms := s.Client.CoreV1().ConfigMaps("default")
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		return "", err
	}
	defer w.Stop()
	created, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "uncached"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	if err := nextIs(w, watch.Added, created.ResourceVersion); err != nil {
		return "", err
	}
	caches, err := debugCaches(ctx, s)
	if err != nil {
		return "", err
	}
	if caches.Has(schema.GroupResource{Resource: "configmaps"}) {
		return "", errors.New("/debug/watchkeeper lists configmaps")
	}
	return fmt.Sprintf("ADDED %s@%s; configmaps not among the caches", created.Name, created.ResourceVersion), nil
}

// checkReadyzFollowsCaches cuts the server from etcd (the proxy forwards
// nothing and resets nothing), waits for /readyz/watch-caches to fail, heals
// the link and waits for it to pass again.
func checkReadyzFollowsCaches(ctx context.Context, s *kubecluster.Server) (string, error) {
	if code, body, err := s.Get(ctx, "/readyz/watch-caches"); err != nil || code != http.StatusOK {
		return "", fmt.Errorf("/readyz/watch-caches before the cut: %d %v %s", code, err, body)
	}
	s.Proxy.Set(netfault.Fault{Blackhole: true})
	cut := time.Now()
	healed := false
	defer func() {
		if !healed {
			s.Proxy.Heal()
		}
	}()
	var failedBody string
	for {
		code, body, err := s.Get(ctx, "/readyz/watch-caches")
		if err == nil && code != http.StatusOK {
			failedBody = body
			break
		}
		if time.Since(cut) > time.Minute {
			return "", fmt.Errorf("/readyz/watch-caches still %d (%v) a minute after etcd was cut off", code, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	notReady := time.Since(cut)
	s.Proxy.Heal()
	healed = true
	heal := time.Now()
	for {
		code, _, err := s.Get(ctx, "/readyz/watch-caches")
		if err == nil && code == http.StatusOK {
			break
		}
		if time.Since(heal) > 2*time.Minute {
			return "", fmt.Errorf("/readyz/watch-caches still %d (%v) 2m after etcd came back", code, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err := kubecluster.WaitReady(ctx, s.KAS, s.Admin, s.URL, 2*time.Minute); err != nil {
		return "", err
	}
	return fmt.Sprintf("failed %v after etcd was cut off (--watch-cache-storage-silence-timeout=3s): %q; ready %v after it came back",
		notReady.Round(100*time.Millisecond), firstLine(failedBody), time.Since(heal).Round(100*time.Millisecond)), nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 160 {
		s = s[:160] + "..."
	}
	return s
}

// stopWithWatches opens watches on cached resources, sends SIGTERM and
// returns how long the server took to exit; every watch must have ended.
func stopWithWatches(ctx context.Context, s *kubecluster.Server) (time.Duration, int, error) {
	dyn, err := dynamic.NewForConfig(s.Admin)
	if err != nil {
		return 0, 0, err
	}
	var ws []watch.Interface
	defer func() {
		for _, w := range ws {
			w.Stop()
		}
	}()
	for _, gvr := range []schema.GroupVersionResource{
		{Version: "v1", Resource: "pods"}, {Version: "v1", Resource: "secrets"}, {Version: "v1", Resource: "namespaces"},
		{Version: "v1", Resource: "serviceaccounts"}, {Group: "coordination.k8s.io", Version: "v1", Resource: "leases"},
		{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"},
		{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
	} {
		for range 3 {
			w, err := dyn.Resource(gvr).Watch(ctx, metav1.ListOptions{AllowWatchBookmarks: true})
			if err != nil {
				return 0, 0, fmt.Errorf("watch %s: %w", gvr.Resource, err)
			}
			ws = append(ws, w)
		}
	}
	// Each watch gets its initial ADDED events; the watches are open.
	time.Sleep(2 * time.Second)
	start := time.Now()
	s.KAS.Stop(90 * time.Second)
	took := time.Since(start)
	for i, w := range ws {
		deadline := time.After(10 * time.Second)
	drain:
		for {
			select {
			case _, ok := <-w.ResultChan():
				if !ok {
					break drain
				}
			case <-deadline:
				return took, len(ws), fmt.Errorf("watch %d still open 10s after the server exited", i)
			}
		}
	}
	return took, len(ws), nil
}
