package cachertest

import (
	"fmt"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
)

type Goroutine struct {
	id    int
	Stack string
}

var goroutineHeader = regexp.MustCompile(`^goroutine (\d+) `)

// OtherGoroutines is every goroutine but the caller's.
func OtherGoroutines() []Goroutine {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []Goroutine
	for i, stack := range strings.Split(string(buf), "\n\n") {
		if i == 0 { // runtime.Stack puts the caller first
			continue
		}
		m := goroutineHeader.FindStringSubmatch(stack)
		if m == nil {
			continue
		}
		id, _ := strconv.Atoi(m[1])
		out = append(out, Goroutine{id: id, Stack: stack})
	}
	return out
}

// WaitForLeaks polls for up to waitFor until no goroutine is leaked, and
// returns the stacks of those that still are.
func WaitForLeaks(leaked func(Goroutine) bool) []string {
	deadline := time.Now().Add(WaitFor)
	for {
		var stacks []string
		for _, g := range OtherGoroutines() {
			if leaked(g) {
				stacks = append(stacks, g.Stack)
			}
		}
		if len(stacks) == 0 || time.Now().After(deadline) {
			return stacks
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func Poll(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(WaitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", WaitFor, what)
		}
		time.Sleep(time.Millisecond)
	}
}

func Everything(bookmarks bool) storage.SelectionPredicate {
	return storage.SelectionPredicate{
		Label: labels.Everything(), Field: fields.Everything(), GetAttrs: PodAttrs, AllowWatchBookmarks: bookmarks,
	}
}

// WebPods selects the pods labelled app=web.
func WebPods() storage.SelectionPredicate {
	p := Everything(false)
	p.Label = labels.SelectorFromSet(MustParseSet("app=web"))
	return p
}

func MustParseSet(s string) labels.Set {
	set, err := labels.ConvertSelectorToLabelsMap(s)
	if err != nil {
		panic(err)
	}
	return set
}

func NextEvent(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatalf("watch closed, want an event")
		}
		return ev
	case <-time.After(WaitFor):
		t.Fatalf("no event within %v", WaitFor)
	}
	return watch.Event{}
}

// ExpectQuiet checks that nothing has been delivered to w. Call it only
// after a point that proves the cacher has acted (stepTicks returns once the
// dispatcher has finished the tick and re-armed its timer; an idle
// watcher's bookmark or event is in its channel by then), so it fails on a
// bookmark the tick should not have sent, however slow the machine, instead
// of passing because a grace period ran out first.
func ExpectQuiet(t *testing.T, w watch.Interface, when string) {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatalf("%s: watch closed, want it open and quiet", when)
		}
		t.Fatalf("%s: got %s, want nothing", when, Describe(ev))
	default:
	}
}

// DrainUntilClosed returns what was still queued once the watch closes.
func DrainUntilClosed(t *testing.T, w watch.Interface) []watch.Event {
	t.Helper()
	var out []watch.Event
	timeout := time.After(WaitFor)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return out
			}
			out = append(out, ev)
		case <-timeout:
			t.Fatalf("watch not closed within %v (drained %d events)", WaitFor, len(out))
		}
	}
}

func EventRV(t *testing.T, ev watch.Event) uint64 {
	t.Helper()
	rv, err := storage.APIObjectVersioner{}.ObjectResourceVersion(ev.Object)
	if err != nil {
		t.Fatalf("RV of %s: %v", Describe(ev), err)
	}
	return rv
}

func Describe(ev watch.Event) string {
	if m, err := meta.Accessor(ev.Object); err == nil {
		return fmt.Sprintf("%s %s@%s labels=%v", ev.Type, m.GetName(), m.GetResourceVersion(), m.GetLabels())
	}
	if s, ok := ev.Object.(*metav1.Status); ok {
		return fmt.Sprintf("%s status %d %s: %s", ev.Type, s.Code, s.Reason, s.Message)
	}
	return fmt.Sprintf("%s %T", ev.Type, ev.Object)
}

func ErrorStatus(t *testing.T, ev watch.Event) *metav1.Status {
	t.Helper()
	if ev.Type != watch.Error {
		t.Fatalf("got %s, want an Error event", Describe(ev))
	}
	s, ok := ev.Object.(*metav1.Status)
	if !ok {
		t.Fatalf("Error event carries %T, want *metav1.Status", ev.Object)
	}
	return s
}

func PodName(i int) string { return fmt.Sprintf("pod-%02d", i) }

// Closed reports whether ch is closed, without waiting.
func Closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Epoch is the fake clocks' start: far from the real time, so a test that
// reads the real clock where it should read the fake one fails.
var Epoch = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)

// ReceivedAll is what w's channel holds now, described, without waiting.
func ReceivedAll(w watch.Interface) []string {
	var got []string
	for {
		select {
		case ev := <-w.ResultChan():
			got = append(got, strings.TrimSuffix(Describe(ev), " labels=map[]"))
		default:
			return got
		}
	}
}
