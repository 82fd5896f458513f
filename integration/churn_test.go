package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"
)

// TestChurn checks the cache's watch delivery end to end under concurrent
// writes: many watchers with different label and field selectors, writers
// creating, relabelling, moving and deleting a small set of pods, and then
// every watcher's event sequence compared with what etcd's own history says
// that selector must see. No loss, no duplicates, no reordering, RVs strictly
// increasing, objects moved into or out of a selector turned into ADDED or
// DELETED, and no watcher closed before the client stops it.

const (
	churnWatchers     = 40
	churnWriters      = 4
	churnOpsPerWriter = 150
	churnNames        = 5
	// churnSilence ends the drain when no watcher has received an event
	// for this long although some have not reached their expected count;
	// churnDrainLimit ends it whatever arrives.
	churnSilence    = 2 * time.Second
	churnDrainLimit = 10 * time.Second
)

var churnNamespaces = []string{"ns-1", "ns-2"}

// churnSelector is one watcher's selector, as a client would write it.
type churnSelector struct {
	label, field string
}

func (s churnSelector) String() string {
	parts := []string{}
	if s.label != "" {
		parts = append(parts, "labels: "+s.label)
	}
	if s.field != "" {
		parts = append(parts, "fields: "+s.field)
	}
	if len(parts) == 0 {
		return "everything"
	}
	return strings.Join(parts, ", ")
}

func (s churnSelector) predicate(t *testing.T, bookmarks bool) storage.SelectionPredicate {
	t.Helper()
	l, err := labels.Parse(s.label)
	if err != nil {
		t.Fatalf("label selector %q: %v", s.label, err)
	}
	f, err := fields.ParseSelector(s.field)
	if err != nil {
		t.Fatalf("field selector %q: %v", s.field, err)
	}
	return storage.SelectionPredicate{Label: l, Field: f, GetAttrs: podAttrs, AllowWatchBookmarks: bookmarks}
}

var churnSelectors = []churnSelector{
	{},
	{label: "app=a"},
	{label: "app=b"},
	{label: "app in (a,b)"},
	{label: "app!=a"},
	{label: "!app"},
	{field: "spec.nodeName=node-1"},
	{field: "spec.nodeName!=node-1"},
	{field: "spec.nodeName="},
	{field: "metadata.namespace=ns-1"},
	{field: "metadata.name=p-1"},
	{field: "status.phase=Running"},
	{label: "app=a", field: "spec.nodeName=node-1"},
	{label: "app in (a,b)", field: "metadata.namespace=ns-2"},
	{label: "app=b", field: "spec.nodeName=node-2,status.phase!=Failed"},
	{field: "spec.nodeName=node-2,metadata.namespace=ns-1"},
	{label: "app notin (b)", field: "metadata.namespace!=ns-1"},
}

// churnEvent is one watch event as the comparison sees it.
type churnEvent struct {
	typ   watch.EventType
	key   string // namespace/name
	rv    uint64
	state string // the fields the writers change, to check which object was sent
}

func (e churnEvent) String() string {
	return fmt.Sprintf("%-8s %-10s rv=%-5d {%s}", e.typ, e.key, e.rv, e.state)
}

func podState(p *example.Pod) string {
	app, ok := p.Labels["app"]
	if !ok {
		app = "-"
	}
	return fmt.Sprintf("app=%s node=%s phase=%s", app, p.Spec.NodeName, p.Status.Phase)
}

// churnWatcher is one watcher and what its reader goroutine saw. The fields
// after done are written by the reader only and read once done is closed.
type churnWatcher struct {
	id        int
	sel       churnSelector
	pred      storage.SelectionPredicate
	bookmarks bool
	w         watch.Interface

	stopping atomic.Bool   // set before the test calls Stop
	received atomic.Int64  // non-bookmark events so far
	newest   atomic.Uint64 // the RV of the newest non-bookmark event so far
	done     chan struct{}

	events      []churnEvent
	bookmarkN   int
	violations  []string
	closedEarly bool
}

func (cw *churnWatcher) String() string {
	return fmt.Sprintf("watcher %d (%s, bookmarks=%v)", cw.id, cw.sel, cw.bookmarks)
}

func (cw *churnWatcher) violate(format string, args ...any) {
	if len(cw.violations) < 10 {
		cw.violations = append(cw.violations, fmt.Sprintf(format, args...))
	}
}

// read consumes the result channel until it closes, checking RV order on
// the way: events strictly above everything seen, bookmarks never below.
func (cw *churnWatcher) read(startRV uint64, activity *atomic.Int64) {
	defer close(cw.done)
	// A watch from startRV must deliver only what came after it.
	lastRV := startRV
	for ev := range cw.w.ResultChan() {
		ev = plainEvent(ev)
		if ev.Type != watch.Bookmark {
			// Bookmarks keep coming on a quiet watch: they are not progress.
			activity.Store(time.Now().UnixNano())
		}
		if ev.Type == watch.Error {
			cw.violate("error event: %#v", ev.Object)
			continue
		}
		acc, err := meta.Accessor(ev.Object)
		if err != nil {
			cw.violate("%s event with %T: %v", ev.Type, ev.Object, err)
			continue
		}
		rv, err := strconv.ParseUint(acc.GetResourceVersion(), 10, 64)
		if err != nil {
			cw.violate("%s event with resourceVersion %q: %v", ev.Type, acc.GetResourceVersion(), err)
			continue
		}
		if ev.Type == watch.Bookmark {
			cw.bookmarkN++
			if !cw.bookmarks {
				cw.violate("bookmark at rv=%d on a watcher that did not allow bookmarks", rv)
			}
			if rv < lastRV {
				cw.violate("bookmark rv=%d went backwards (last seen rv=%d)", rv, lastRV)
			}
			lastRV = max(lastRV, rv)
			continue
		}
		pod, ok := ev.Object.(*example.Pod)
		if !ok {
			cw.violate("%s event with %T", ev.Type, ev.Object)
			continue
		}
		got := churnEvent{typ: ev.Type, key: pod.Namespace + "/" + pod.Name, rv: rv, state: podState(pod)}
		if rv <= lastRV {
			cw.violate("event %v not above last seen rv=%d (event #%d)", got, lastRV, len(cw.events))
		}
		lastRV = max(lastRV, rv)
		cw.events = append(cw.events, got)
		cw.received.Add(1)
		cw.newest.Store(rv)
	}
	cw.closedEarly = !cw.stopping.Load()
}

// churnChange is one etcd revision under the pods prefix.
type churnChange struct {
	rev  uint64
	key  string       // namespace/name
	cur  *example.Pod // nil for a delete
	prev *example.Pod // nil for a creation
}

// churnStats counts what the writers did.
type churnStats struct {
	created, updated, deleted, skipped atomic.Int64
}

func TestChurn(t *testing.T) {
	start := time.Now()
	// Bookmarks every second or so, and a history window long enough for
	// the watchers opened mid-churn to replay from the start marker.
	e := setup(t, nodeNameIndex, withSchedule(time.Second, 2*time.Second, 5*time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	startRV := churnMarker(ctx, t, e, "start")

	// Half the watchers open before the churn; the rest open while it runs,
	// from the same RV, so they replay history and then switch to live
	// events in the middle of it.
	watchCtx, watchCancel := context.WithCancel(context.Background())
	t.Cleanup(watchCancel)
	var activity atomic.Int64
	activity.Store(time.Now().UnixNano())
	watchers := make([]*churnWatcher, churnWatchers)
	open := func(i int) {
		sel := churnSelectors[i%len(churnSelectors)]
		// Each selector gets both variants across the rounds.
		bookmarks := (i+i/len(churnSelectors))%2 == 0
		cw := &churnWatcher{id: i, sel: sel, bookmarks: bookmarks, done: make(chan struct{})}
		cw.pred = sel.predicate(t, bookmarks)
		w, err := e.cacher.Watch(watchCtx, "/pods/", storage.ListOptions{
			ResourceVersion: strconv.FormatUint(startRV, 10),
			Recursive:       true,
			Predicate:       cw.pred,
		})
		if err != nil {
			t.Fatalf("opening %v: %v", cw, err)
		}
		cw.w = w
		watchers[i] = cw
		go cw.read(startRV, &activity)
	}
	stopAll := func() {
		for _, cw := range watchers {
			if cw != nil && cw.w != nil {
				cw.stopping.Store(true)
				cw.w.Stop()
			}
		}
	}
	defer stopAll()
	early := churnWatchers / 2
	for i := range early {
		open(i)
	}

	var stats churnStats
	var writers sync.WaitGroup
	// Should the test fail while they run, the writers end before it does.
	defer func() { cancel(); writers.Wait() }()
	seed := uint64(time.Now().UnixNano())
	t.Logf("writer seed %d", seed)
	for i := range churnWriters {
		writers.Add(1)
		go func() {
			defer writers.Done()
			churnWrite(ctx, t, e, rand.New(rand.NewPCG(seed, uint64(i))), &stats)
		}()
	}
	for i := early; i < churnWatchers; i++ {
		time.Sleep(50 * time.Millisecond)
		open(i)
	}
	writers.Wait()
	writeDone := time.Now()
	if t.Failed() {
		t.FailNow()
	}

	finalRV := churnMarker(ctx, t, e, "end")
	// The cache has caught up once a read at the final RV succeeds; the
	// dispatcher may still be handing events to watchers after that.
	if err := e.cacher.Get(ctx, "/pods/marker/end", storage.GetOptions{ResourceVersion: strconv.FormatUint(finalRV, 10)}, &example.Pod{}); err != nil {
		t.Fatalf("cache did not reach the final rv=%d: %v", finalRV, err)
	}

	changes := churnHistory(ctx, t, e, startRV, finalRV)
	expected := make([][]churnEvent, len(watchers))
	for i, cw := range watchers {
		expected[i] = churnExpected(t, cw.pred, changes)
	}

	// Drain: until every watcher has had its fence, an event past the
	// final marker. Events reach a watcher in RV order, so by then whatever
	// it was sent up to the final marker, a duplicate or a stray included,
	// has arrived: no grace period to guess. The drain also ends when
	// nothing arrives for a while, or at the limit; the comparison below
	// then says what is missing.
	drainStart := time.Now()
	churnFence(ctx, t, e)
	unfenced := func() []*churnWatcher {
		var out []*churnWatcher
		for _, cw := range watchers {
			if cw.newest.Load() <= finalRV {
				out = append(out, cw)
			}
		}
		return out
	}
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, churnDrainLimit, true, func(context.Context) (bool, error) {
		if len(unfenced()) == 0 {
			return true, nil
		}
		if time.Since(time.Unix(0, activity.Load())) > churnSilence && time.Since(drainStart) > churnSilence {
			return false, fmt.Errorf("no event for %v", churnSilence)
		}
		return false, nil
	}); err != nil {
		for _, cw := range unfenced() {
			t.Errorf("%v: no event past the final marker rv=%d %v into the drain (%v)", cw, finalRV, time.Since(drainStart).Round(time.Millisecond), err)
		}
	}
	drainTook := time.Since(drainStart)
	// A reader whose channel closed before this marks itself closedEarly.
	stopAll()
	for _, cw := range watchers {
		select {
		case <-cw.done:
		case <-time.After(5 * time.Second):
			t.Fatalf("%v: result channel not closed 5s after Stop", cw)
		}
	}

	// Compare.
	var delivered, bookmarksN, failed int
	minN, maxN := -1, 0
	for i, cw := range watchers {
		want, got := expected[i], cw.events
		// The fence is not part of the comparison; past the final marker
		// there must be nothing but fence pods.
		if j := slices.IndexFunc(got, func(ev churnEvent) bool { return ev.rv > finalRV }); j >= 0 {
			for _, ev := range got[j:] {
				if !strings.HasPrefix(ev.key, "fence") && !strings.Contains(ev.key, "/fence-") {
					t.Errorf("%v: event past the final marker that is not a fence: %v", cw, ev)
				}
			}
			got = got[:j]
		}
		delivered += len(got)
		bookmarksN += cw.bookmarkN
		if minN < 0 || len(got) < minN {
			minN = len(got)
		}
		maxN = max(maxN, len(got))
		bad := false
		if cw.closedEarly {
			t.Errorf("%v: result channel closed before the test stopped the watch", cw)
			bad = true
		}
		for _, v := range cw.violations {
			t.Errorf("%v: %s", cw, v)
			bad = true
		}
		if idx := churnFirstMismatch(want, got); idx >= 0 {
			t.Errorf("%v: event sequence differs from etcd's history at index %d (want %d events, got %d)\n%s",
				cw, idx, len(want), len(got), churnDiff(want, got, idx))
			bad = true
		}
		if bad {
			failed++
		}
	}
	if minN < 0 {
		minN = 0
	}
	t.Logf("writes: %d created, %d updated, %d deleted, %d skipped (conflict/exists/not found); %d etcd revisions in (%d, %d]",
		stats.created.Load(), stats.updated.Load(), stats.deleted.Load(), stats.skipped.Load(), len(changes), startRV, finalRV)
	t.Logf("watchers: %d (%d opened mid-churn), %d events delivered, per watcher min %d max %d, %d bookmarks; %d watchers failed",
		len(watchers), churnWatchers-early, delivered, minN, maxN, bookmarksN, failed)
	t.Logf("timing: writers done at %v, drain took %v, total %v",
		writeDone.Sub(start).Round(time.Millisecond), drainTook.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if bookmarksN == 0 {
		t.Logf("note: no bookmarks arrived during the run, so the bookmark ordering check was vacuous")
	}
}

// churnMarker writes a pod outside the writers' key space and returns its RV.
func churnMarker(ctx context.Context, t *testing.T, e *env, name string) uint64 {
	t.Helper()
	out := &example.Pod{}
	pod := &example.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "marker", Name: name}}
	if err := e.cacher.Create(ctx, "/pods/marker/"+name, pod, out, 0); err != nil {
		t.Fatalf("writing the %s marker: %v", name, err)
	}
	rv, err := strconv.ParseUint(out.ResourceVersion, 10, 64)
	if err != nil {
		t.Fatalf("marker rv %q: %v", out.ResourceVersion, err)
	}
	return rv
}

// churnFence writes, after the final marker, one pod for each selector that
// the selector matches, so that every watcher gets an event past the final
// marker.
func churnFence(ctx context.Context, t *testing.T, e *env) {
	t.Helper()
	for i, sel := range churnSelectors {
		pod := churnFencePod(t, i, sel.predicate(t, false))
		key := "/pods/" + pod.Namespace + "/" + pod.Name
		if err := e.cacher.Create(ctx, key, pod, &example.Pod{}, 0); err != nil {
			t.Fatalf("writing the fence %s for %s: %v", key, sel, err)
		}
	}
}

// churnFencePod is a pod pred matches, outside the writers' keys: named
// fence-i in a writers' namespace, or p-1 in a namespace fence-i of its own.
func churnFencePod(t *testing.T, i int, pred storage.SelectionPredicate) *example.Pod {
	t.Helper()
	type place struct{ ns, name string }
	fence := fmt.Sprintf("fence-%d", i)
	places := []place{{churnNamespaces[0], fence}, {churnNamespaces[1], fence}, {fence, "p-1"}}
	for _, at := range places {
		for _, app := range []string{"a", "b", "c", ""} {
			for _, node := range []string{"node-1", "node-2", ""} {
				for _, phase := range []string{"Running", "Pending", "Failed"} {
					pod := &example.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: at.ns, Name: at.name}}
					if app != "" {
						pod.Labels = map[string]string{"app": app}
					}
					pod.Spec.NodeName = node
					pod.Status.Phase = example.PodPhase(phase)
					if ok, err := pred.Matches(pod); err == nil && ok {
						return pod
					}
				}
			}
		}
	}
	t.Fatalf("no fence pod matches %v", pred)
	return nil
}

// churnWrite does one writer's random operations over the small key space,
// so pods are re-created, relabelled and moved between nodes. Conflicts,
// existing and missing keys are expected and skipped.
func churnWrite(ctx context.Context, t *testing.T, e *env, r *rand.Rand, stats *churnStats) {
	pick := func(options ...string) string { return options[r.IntN(len(options))] }
	setApp := func(p *example.Pod) {
		if app := pick("a", "a", "b", "b", "c", ""); app != "" {
			p.Labels = map[string]string{"app": app}
		} else {
			p.Labels = nil
		}
	}
	for range churnOpsPerWriter {
		ns := churnNamespaces[r.IntN(len(churnNamespaces))]
		name := fmt.Sprintf("p-%d", r.IntN(churnNames))
		key := "/pods/" + ns + "/" + name
		var err error
		switch x := r.IntN(100); {
		case x < 35:
			pod := &example.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
			setApp(pod)
			pod.Spec.NodeName = pick("node-1", "node-2", "")
			pod.Status.Phase = example.PodPhase(pick("Pending", "Running", "Failed"))
			err = e.cacher.Create(ctx, key, pod, &example.Pod{}, 0)
			if err == nil {
				stats.created.Add(1)
			}
		case x < 80:
			err = e.cacher.GuaranteedUpdate(ctx, key, &example.Pod{}, false, nil,
				func(in runtime.Object, _ storage.ResponseMeta) (runtime.Object, *uint64, error) {
					pod := in.(*example.Pod).DeepCopy()
					switch r.IntN(4) {
					case 0:
						setApp(pod)
					case 1:
						pod.Spec.NodeName = pick("node-1", "node-2", "")
					case 2:
						pod.Status.Phase = example.PodPhase(pick("Pending", "Running", "Failed"))
					default:
						setApp(pod)
						pod.Spec.NodeName = pick("node-1", "node-2", "")
					}
					return pod, nil, nil
				}, nil)
			if err == nil {
				stats.updated.Add(1)
			}
		default:
			err = e.cacher.Delete(ctx, key, &example.Pod{}, nil, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{})
			if err == nil {
				stats.deleted.Add(1)
			}
		}
		switch {
		case err == nil:
		case storage.IsExist(err), storage.IsNotFound(err), storage.IsConflict(err):
			stats.skipped.Add(1)
		default:
			t.Errorf("writing %s: %v", key, err)
			return
		}
	}
}

// churnHistory reads etcd's own record of every change under the pods
// prefix in (startRV, finalRV], with the previous value of each key.
func churnHistory(ctx context.Context, t *testing.T, e *env, startRV, finalRV uint64) []churnChange {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	const prefix = "/registry/pods/"
	wch := e.client.Client.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(int64(startRV+1)), clientv3.WithPrevKV())
	var out []churnChange
	for resp := range wch {
		if err := resp.Err(); err != nil {
			t.Fatalf("etcd history watch: %v", err)
		}
		for _, ev := range resp.Events {
			rev := uint64(ev.Kv.ModRevision)
			if rev > finalRV {
				t.Fatalf("etcd history has rev %d past the final marker %d", rev, finalRV)
			}
			if n := len(out); n > 0 && rev <= out[n-1].rev {
				t.Fatalf("etcd history not in order: rev %d after %d", rev, out[n-1].rev)
			}
			c := churnChange{rev: rev, key: strings.TrimPrefix(string(ev.Kv.Key), prefix)}
			if ev.PrevKv != nil {
				c.prev = churnDecode(t, ev.PrevKv.Value, uint64(ev.PrevKv.ModRevision))
			}
			if ev.Type == clientv3.EventTypePut {
				c.cur = churnDecode(t, ev.Kv.Value, rev)
			} else if c.prev == nil {
				t.Fatalf("etcd delete of %s at rev %d without a previous value", c.key, rev)
			}
			out = append(out, c)
			if rev == finalRV {
				return out
			}
		}
	}
	t.Fatalf("etcd history watch ended before the final marker rv=%d (ctx: %v)", finalRV, ctx.Err())
	return nil
}

func churnDecode(t *testing.T, data []byte, rv uint64) *example.Pod {
	t.Helper()
	obj, err := runtime.Decode(protoCodec, data)
	if err != nil {
		t.Fatalf("decoding a pod from etcd: %v", err)
	}
	pod, ok := obj.(*example.Pod)
	if !ok {
		t.Fatalf("decoded %T from etcd, want *example.Pod", obj)
	}
	pod.ResourceVersion = strconv.FormatUint(rv, 10)
	return pod
}

// churnExpected is what a watch with pred must deliver for these changes:
// a change that moves the object into the selector is an ADDED, out of it a
// DELETED of the old object at the change's RV.
func churnExpected(t *testing.T, pred storage.SelectionPredicate, changes []churnChange) []churnEvent {
	t.Helper()
	matches := func(p *example.Pod) bool {
		if p == nil {
			return false
		}
		ok, err := pred.Matches(p)
		if err != nil {
			t.Fatalf("matching %s/%s: %v", p.Namespace, p.Name, err)
		}
		return ok
	}
	var out []churnEvent
	for _, c := range changes {
		curOK, prevOK := matches(c.cur), matches(c.prev)
		switch {
		case curOK && prevOK:
			out = append(out, churnEvent{watch.Modified, c.key, c.rev, podState(c.cur)})
		case curOK:
			out = append(out, churnEvent{watch.Added, c.key, c.rev, podState(c.cur)})
		case prevOK:
			// A delete, or an update that took the object out of the selector.
			out = append(out, churnEvent{watch.Deleted, c.key, c.rev, podState(c.prev)})
		}
	}
	return out
}

func churnFirstMismatch(want, got []churnEvent) int {
	for i := range min(len(want), len(got)) {
		if want[i] != got[i] {
			return i
		}
	}
	if len(want) != len(got) {
		return min(len(want), len(got))
	}
	return -1
}

// churnDiff shows both sequences around index i.
func churnDiff(want, got []churnEvent, i int) string {
	var b strings.Builder
	show := func(name string, seq []churnEvent) {
		fmt.Fprintf(&b, "  %s:\n", name)
		lo, hi := max(0, i-3), min(len(seq), i+5)
		if lo >= hi {
			fmt.Fprintf(&b, "    (ends at index %d)\n", len(seq))
		}
		for j := lo; j < hi; j++ {
			mark := " "
			if j == i {
				mark = ">"
			}
			fmt.Fprintf(&b, "   %s[%d] %v\n", mark, j, seq[j])
		}
	}
	show("want (etcd)", want)
	show("got (cache)", got)
	return b.String()
}
