package hub

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"
	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
)

// countingSelector is a field selector that counts its matches.
type countingSelector struct {
	fields.Selector
	calls *int
}

func (s countingSelector) Matches(f fields.Fields) bool {
	*s.calls++
	return s.Selector.Matches(f)
}

// classTest files watchers in a watcherSet, as the cache does, and
// dispatches to the candidates the set gives.
type classTest struct {
	set   watcherSet
	d     *Dispatcher
	calls int
}

func newClassTest() *classTest {
	ct := &classTest{set: newWatcherSet()}
	ct.d = &Dispatcher{Env: DispatchEnv{
		Clock:      testingclock.NewFakeClock(cachertest.Epoch),
		Candidates: func(dst []*Watcher, e *objects.Event) []*Watcher { return ct.set.candidates(dst, e) },
		Objects: func(e *objects.Event, _ int64) EventObjects {
			return EventObjects{Event: e, Versioner: storage.APIObjectVersioner{}, Dropped: func(string, uint64, error, ...any) {}}
		},
		TooSlow:    func(*Watcher) {},
		Dispatched: func() {},
	}}
	return ct
}

// watch files a watcher of key with the field selector sel, whose matches
// are counted.
func (ct *classTest) watch(t *testing.T, key string, sel string) *Watcher {
	t.Helper()
	parsed, err := fields.ParseSelector(sel)
	if err != nil {
		t.Fatal(err)
	}
	w, _, _ := newLoneWatcher(100)
	w.Key, w.StartRV = key, 100
	w.Pred = storage.SelectionPredicate{Label: labels.Everything(), Field: countingSelector{parsed, &ct.calls}}
	ct.set.add(w, MatchSignature(w))
	return w
}

// podA is pod a at rv, with its status field.
func podA(rv uint64, status string) *objects.Object {
	pod := cachertest.NewPod("a", rv, nil, "")
	key, _ := cachertest.PodKey(pod)
	return objects.NewDecoded(key, pod, labels.Set{}, fields.Set{"metadata.name": "a", "status": status})
}

// Ten watchers of one Secret with one selector (kubelets' shape) cost one
// selection of an event, not ten: their selector matches the object before
// and after the change once. A watcher that selects differently is worked
// out on its own.
func TestMatchClassSelectsOncePerEvent(t *testing.T) {
	ct := newClassTest()
	a := podA(150, "on")
	var same []*Watcher
	for range 10 {
		same = append(same, ct.watch(t, a.Key, "metadata.name=a"))
	}
	other := ct.watch(t, a.Key, "status=on")
	if len(ct.set.classes) != 2 {
		t.Fatalf("%d match classes, want 2: one per key and selector", len(ct.set.classes))
	}
	ct.d.Dispatch(&objects.Event{Type: watch.Modified, RV: 151, Cur: podA(151, "on"), Prev: a})
	if ct.calls != 4 {
		t.Errorf("%d selector matches for 11 watchers in 2 classes, want 4 (before and after, once per class)", ct.calls)
	}
	for i, w := range append(same, other) {
		if got := fmt.Sprint(cachertest.ReceivedAll(w)); got != "[MODIFIED a@151]" {
			t.Errorf("watcher %d got %s, want [MODIFIED a@151]", i, got)
		}
	}
}

// The memo is one event's: in one batch an update that keeps the object in
// the selector and then one that moves it out are a MODIFIED and a DELETED
// for every watcher of the class.
func TestMatchClassMemoIsPerEvent(t *testing.T) {
	ct := newClassTest()
	a := podA(150, "on")
	w1 := ct.watch(t, a.Key, "status=on")
	w2 := ct.watch(t, a.Key, "status=on")
	on := podA(151, "on")
	ct.d.Dispatch(
		&objects.Event{Type: watch.Modified, RV: 151, Cur: on, Prev: a},
		&objects.Event{Type: watch.Modified, RV: 152, Cur: podA(152, "off"), Prev: on},
	)
	for i, w := range []*Watcher{w1, w2} {
		if got := fmt.Sprint(cachertest.ReceivedAll(w)); got != "[MODIFIED a@151 DELETED a@152]" {
			t.Errorf("watcher %d got %s, want [MODIFIED a@151 DELETED a@152]", i+1, got)
		}
	}
}

// Watchers share a class only when key, recursion and selectors are the
// same, and a class lives as long as one of its watchers is filed.
func TestMatchClassInterning(t *testing.T) {
	ct := newClassTest()
	w1 := ct.watch(t, "/pods/ns/a", "status=on")
	w2 := ct.watch(t, "/pods/ns/a", "status=on")
	for name, w := range map[string]*Watcher{
		"another key":      ct.watch(t, "/pods/ns/b", "status=on"),
		"another selector": ct.watch(t, "/pods/ns/a", "status=off"),
	} {
		if w.class == w1.class {
			t.Errorf("%s shares the class of /pods/ns/a status=on", name)
		}
		ct.set.remove(w)
	}
	// Everything and Nothing both print as "".
	for _, sel := range []labels.Selector{labels.Everything(), labels.Nothing()} {
		w, _, _ := newLoneWatcher(100)
		w.Key, w.Pred = "/pods/ns/c", storage.SelectionPredicate{Label: sel}
		ct.set.add(w, MatchSignature(w))
	}
	if len(ct.set.classes) != 3 {
		t.Errorf("%d classes after adding Everything and Nothing of /pods/ns/c, want 3", len(ct.set.classes))
	}
	for w := range ct.set.all {
		if w.Key == "/pods/ns/c" {
			ct.set.remove(w)
		}
	}
	recursive, _, _ := newLoneWatcher(100)
	recursive.Key, recursive.Recursive, recursive.Pred = "/pods/ns/a", true, w1.Pred
	ct.set.add(recursive, MatchSignature(recursive))
	if recursive.class == w1.class {
		t.Error("a recursive watcher shares the class of an exact-key one")
	}
	ct.set.remove(recursive)
	if w1.class != w2.class || w1.class.refs != 2 {
		t.Fatalf("same key and selector: shared %v, refs %d; want shared, 2", w1.class == w2.class, w1.class.refs)
	}
	ct.set.remove(w1)
	ct.set.remove(w1) // removing twice is a no-op
	if len(ct.set.classes) != 1 || w2.class.refs != 1 {
		t.Fatalf("after one of two left: %d classes, refs %d; want 1, 1", len(ct.set.classes), w2.class.refs)
	}
	ct.set.remove(w2)
	if len(ct.set.classes) != 0 {
		t.Errorf("%d classes after every watcher left, want 0", len(ct.set.classes))
	}
}

// Two watches alike but for their shard are two match classes: the
// dispatcher's per-class memo must not hand one the other's selection.
func TestShardIsPartOfTheMatchSignature(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.ShardedListAndWatch, true)
	a := &Watcher{Key: "/pods/", Recursive: true}
	b := &Watcher{Key: "/pods/", Recursive: true}
	b.Shard, _ = objects.NewShardFilter(cachertest.ShardPred(t, cachertest.ShardRange(objects.ShardFieldUID, 0, 2)))
	if MatchSignature(a) == MatchSignature(b) {
		t.Fatal("a sharded and an unsharded watch share a match class")
	}
}
