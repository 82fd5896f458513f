package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"

	"github.com/watchkeeper/watchkeeper/cacher"
	"github.com/watchkeeper/watchkeeper/internal/fixtures"
	"github.com/watchkeeper/watchkeeper/internal/testchild"
)

// The memory budget against a real etcd (internal/feed/budget.go,
// cacher/budget_relay.go; issue 50, item 2): a resource that grows past
// its budget is served from etcd, correctly, with the watches open before
// it went over delivering every event in order, none twice; once it
// shrinks below nine tenths of the budget it is cached again, and those
// watches are still open.

// budgetPodAnnotation pads each pod to about 1.2 KB in etcd.
const budgetPodAnnotation = 1000

// budgetNS is the budget tests' namespace.
const budgetNS = "budget"

// budgetPod writes pod name: created, or its label set to gen; it returns
// the write's RV.
func budgetPod(ctx context.Context, t *testing.T, e *env, name string, gen int) uint64 {
	const ns = budgetNS
	t.Helper()
	key := bhPodKey(ns, name)
	out := &example.Pod{}
	pod := &example.Pod{ObjectMeta: metav1.ObjectMeta{
		Namespace: ns, Name: name,
		Labels:      map[string]string{"gen": fmt.Sprint(gen), "app": "budget"},
		Annotations: map[string]string{"pad": strings.Repeat("x", budgetPodAnnotation)},
	}}
	var err error
	if gen == 0 {
		err = e.cacher.Create(ctx, key, pod, out, 0)
	} else {
		err = e.cacher.GuaranteedUpdate(ctx, key, out, false, nil, storage.SimpleUpdate(func(in runtime.Object) (runtime.Object, error) {
			p := in.(*example.Pod).DeepCopy()
			p.Labels = pod.Labels
			return p, nil
		}), nil)
	}
	if err != nil {
		t.Fatalf("writing %s/%s: %v", ns, name, err)
	}
	return bhRvOf(t, out)
}

// budgetDelete deletes pod name and returns the RV of the deletion, which
// its DELETED event carries.
func budgetDelete(ctx context.Context, t *testing.T, e *env, name string) uint64 {
	const ns = budgetNS
	t.Helper()
	out := &example.Pod{}
	if err := e.cacher.Delete(ctx, bhPodKey(ns, name), out, nil, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{}); err != nil {
		t.Fatalf("deleting %s/%s: %v", ns, name, err)
	}
	return bhRvOf(t, out)
}

// budgetWaitFor polls the cache's Inspection until cond holds.
func budgetWaitFor(ctx context.Context, t *testing.T, e *env, what string, cond func(cacher.Inspection) bool) cacher.Inspection {
	t.Helper()
	limit := time.Now().Add(time.Minute)
	for {
		in := e.cacher.Inspect(ctx)
		if cond(in) {
			return in
		}
		if time.Now().After(limit) {
			t.Fatalf("%s: not within a minute; the cache: over budget %v, ready %v, estimated %d bytes, relayed %d",
				what, in.OverBudget, in.Ready, in.EstimatedBytes, in.Relayed)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// budgetSameList checks that a list through the cache not older than the
// last write, atLeast, has what etcd has now. (At RV "0" the cache may
// still be applying the last writes, as upstream's may.)
func budgetSameList(ctx context.Context, t *testing.T, e *env, sel labels.Selector, atLeast uint64) int {
	t.Helper()
	names := func(s storage.Interface, rv string, match metav1.ResourceVersionMatch) []string {
		list := &example.PodList{}
		pred := bhEverything(false)
		pred.Label, pred.GetAttrs = sel, podAttrs
		if err := s.GetList(ctx, "/pods/", storage.ListOptions{ResourceVersion: rv, ResourceVersionMatch: match, Recursive: true, Predicate: pred}, list); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range list.Items {
			out = append(out, p.Namespace+"/"+p.Name+"@"+p.ResourceVersion)
		}
		slices.Sort(out)
		return out
	}
	got, want := names(e.cacher, fmt.Sprint(atLeast), metav1.ResourceVersionMatchNotOlderThan), names(e.raw, "", "")
	if !slices.Equal(got, want) {
		t.Fatalf("list through the cache (%d items) is not etcd's (%d items):\n got %v\nwant %v", len(got), len(want), got, want)
	}
	return len(got)
}

func TestBudgetOverAndBackWithWatchesOpen(t *testing.T) {
	t.Parallel() // in a process of its own: the metrics are the process's
	if !testchild.Isolate(t) {
		return
	}
	const (
		ns     = budgetNS
		budget = 40 * (budgetPodAnnotation + 200) // about 40 pods
		period = 100 * time.Millisecond
	)
	e := setup(t, func(c *cacher.Config) { c.MaxBytes, c.BudgetCheckPeriod = budget, period })
	ctx := context.Background()
	pods := map[string]string{"resource": "pods"}
	readsOver := func(verb string) float64 {
		v, _ := metricValue(t, "watchkeeper_watch_cache_reads_to_storage_total", map[string]string{"resource": "pods", "verb": verb, "reason": "over_budget"})
		return v
	}

	// 25 pods: under the budget.
	var rvs []uint64
	for i := range 25 {
		rvs = append(rvs, budgetPod(ctx, t, e, fmt.Sprintf("p%02d", i), 0))
	}
	from := rvs[len(rvs)-1]
	bhWaitCached(ctx, t, e, ns, "p24", from)
	wantKins := 1
	if fixtures.CompactTests() {
		wantKins = 0 // compact form shares nothing with siblings
	}
	if in := e.cacher.Inspect(ctx); in.OverBudget || in.SiblingKins != wantKins {
		t.Fatalf("at 25 pods of one namespace: over the budget %v (%d bytes estimated, budget %d), %d sibling kins kept (want %d)",
			in.OverBudget, in.EstimatedBytes, budget, in.SiblingKins, wantKins)
	}
	// Two watches from here: every pod, and the pods of one label.
	all, err := e.cacher.Watch(ctx, "/pods/", storage.ListOptions{ResourceVersion: fmt.Sprint(from), Recursive: true, Predicate: bhEverything(false)})
	if err != nil {
		t.Fatal(err)
	}
	defer all.Stop()
	selected := labels.SelectorFromSet(labels.Set{"gen": "1"})
	pred := bhEverything(false)
	pred.Label = selected // no GetAttrs: the cache's own serve it, and its relay
	gen1, err := e.cacher.Watch(ctx, "/pods/", storage.ListOptions{ResourceVersion: fmt.Sprint(from), Recursive: true, Predicate: pred})
	if err != nil {
		t.Fatal(err)
	}
	defer gen1.Stop()
	var allRVs, gen1RVs []uint64

	// 35 more: over it. The cache lets go, and etcd serves.
	for i := 25; i < 60; i++ {
		allRVs = append(allRVs, budgetPod(ctx, t, e, fmt.Sprintf("p%02d", i), 0))
	}
	over := budgetWaitFor(ctx, t, e, "over the budget at 60 pods", func(in cacher.Inspection) bool { return in.OverBudget })
	if over.Ready || over.Relayed != 2 || over.EstimatedBytes <= budget || over.SiblingKins != 0 {
		t.Errorf("over the budget: ready %v (want false: it holds nothing), %d watches relayed (want 2), estimated %d bytes (budget %d), "+
			"%d sibling kins kept (want 0: no object held for sharing)",
			over.Ready, over.Relayed, over.EstimatedBytes, budget, over.SiblingKins)
	}
	if err := e.cacher.ReadinessCheck(); err != nil {
		t.Errorf("over the budget the resource is served from etcd, but its readiness check fails: %v", err)
	}
	if v, _ := metricValue(t, "watchkeeper_watch_cache_over_budget", pods); v != 1 {
		t.Errorf("over_budget gauge %v, want 1", v)
	}
	// Writes go on, and some match the second watch.
	for i := range 10 {
		rv := budgetPod(ctx, t, e, fmt.Sprintf("p%02d", i), 1)
		allRVs, gen1RVs = append(allRVs, rv), append(gen1RVs, rv)
	}
	lists0, gets0, watches0 := readsOver("list"), readsOver("get"), readsOver("watch")
	last := allRVs[len(allRVs)-1]
	if n := budgetSameList(ctx, t, e, labels.Everything(), last); n != 60 {
		t.Errorf("listed %d pods over the budget, want 60", n)
	}
	budgetSameList(ctx, t, e, selected, last)
	got := &example.Pod{}
	if err := e.cacher.Get(ctx, bhPodKey(ns, "p03"), storage.GetOptions{ResourceVersion: "0"}, got); err != nil || got.Labels["gen"] != "1" {
		t.Errorf("get over the budget: %v, labels %v (want gen 1)", err, got.Labels)
	}
	late, err := e.cacher.Watch(ctx, "/pods/", storage.ListOptions{ResourceVersion: fmt.Sprint(rvs[0]), Recursive: true, Predicate: bhEverything(false)})
	if err != nil {
		t.Fatal(err)
	}
	late.Stop()
	if readsOver("list") < lists0+2 || readsOver("get") < gets0+1 || readsOver("watch") < watches0+1 {
		t.Errorf("reads to etcd over the budget: lists +%v (want 2), gets +%v (want 1), watches +%v (want 1)",
			readsOver("list")-lists0, readsOver("get")-gets0, readsOver("watch")-watches0)
	}
	// Stats answers from the budget's last count, made each period.
	waitHostile(t, 30*time.Second, "stats count the 60 pods", func() (bool, string) {
		st, err := e.cacher.Stats(ctx)
		return err == nil && st.ObjectCount == 60, fmt.Sprintf("%+v, %v", st, err)
	})

	// Down to 20: below nine tenths of the budget. Cached again.
	for i := 20; i < 60; i++ {
		allRVs = append(allRVs, budgetDelete(ctx, t, e, fmt.Sprintf("p%02d", i)))
	}
	budgetWaitFor(ctx, t, e, "cached again at 20 pods", func(in cacher.Inspection) bool { return !in.OverBudget && in.Ready })
	lists1 := readsOver("list")
	if n := budgetSameList(ctx, t, e, labels.Everything(), allRVs[len(allRVs)-1]); n != 20 {
		t.Errorf("listed %d pods back on the cache, want 20", n)
	}
	if readsOver("list") != lists1 {
		t.Errorf("a list went to etcd back under the budget")
	}
	if v, _ := metricValue(t, "watchkeeper_watch_cache_over_budget", pods); v != 0 {
		t.Errorf("over_budget gauge %v back under the budget, want 0", v)
	}

	// The watches opened before: every event, in order, none twice, and
	// still open for the next.
	final := budgetPod(ctx, t, e, "p00", 2) // p00 leaves gen1's selector
	stallReadAll(t, all, append(allRVs, final), time.Minute)
	stallReadAll(t, gen1, append(gen1RVs, final), time.Minute)
	if v, _ := metricValue(t, "apiserver_terminated_watchers_total", pods); v != 0 {
		t.Errorf("%v watchers terminated, want 0", v)
	}
}

// TestBudgetOverWhileAWatcherIsStalled: a watch whose client stopped
// reading stalled (its queue bound passed) before the resource went over
// its budget; the history it would resume from is let go of, and it
// resumes from etcd instead: every event, in order, none twice.
func TestBudgetOverWhileAWatcherIsStalled(t *testing.T) {
	t.Parallel() // in a process of its own: the metrics are the process's
	if !testchild.Isolate(t) {
		return
	}
	const budget = 40 * (budgetPodAnnotation + 200)
	e := setup(t, func(c *cacher.Config) { c.MaxBytes, c.BudgetCheckPeriod = budget, 100*time.Millisecond })
	ctx := context.Background()
	pods := map[string]string{"resource": "pods"}
	var want []uint64
	for i := range 20 {
		want = append(want, budgetPod(ctx, t, e, fmt.Sprintf("p%02d", i), 0))
	}
	from := want[len(want)-1]
	want = want[:0]
	bhWaitCached(ctx, t, e, budgetNS, "p19", from)
	w, err := e.cacher.Watch(ctx, "/pods/", storage.ListOptions{ResourceVersion: fmt.Sprint(from), Recursive: true, Predicate: bhEverything(false)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	stalled0, _ := metricValue(t, "watchkeeper_watch_cache_slow_watchers_total", withOutcome(pods, "stalled"))

	// 1,500 updates, past the watcher's queue bound of 1,024, unread.
	for gen := 1; gen <= 75; gen++ {
		for i := range 20 {
			want = append(want, budgetPod(ctx, t, e, fmt.Sprintf("p%02d", i), gen))
		}
	}
	waitHostile(t, 30*time.Second, "the unread watch stalls", func() (bool, string) {
		n, _ := metricValue(t, "watchkeeper_watch_cache_slow_watchers_total", withOutcome(pods, "stalled"))
		return n > stalled0, fmt.Sprintf("stalls %v", n-stalled0)
	})
	// Then over the budget.
	for i := 20; i < 60; i++ {
		want = append(want, budgetPod(ctx, t, e, fmt.Sprintf("p%02d", i), 0))
	}
	over := budgetWaitFor(ctx, t, e, "over the budget at 60 pods", func(in cacher.Inspection) bool { return in.OverBudget })
	if over.Relayed != 1 {
		t.Errorf("%d watches relayed, want the stalled one", over.Relayed)
	}
	stallReadAll(t, w, want, 2*time.Minute)
	if v, _ := metricValue(t, "apiserver_terminated_watchers_total", pods); v != 0 {
		t.Errorf("%v watchers terminated, want 0", v)
	}
}
