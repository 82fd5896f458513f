package storagebench

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
)

// TestHoldingKeepsObjectsAndTheWindow: the holding floor holds the newest
// object per key (none after a deletion) and exactly the events younger
// than the window, each with the object it replaced.
func TestHoldingKeepsObjectsAndTheWindow(t *testing.T) {
	h := &holding{window: 10 * time.Second, objects: map[string]runtime.Object{}}
	start := time.Unix(1_700_000_000, 0)
	v1, v2 := &example.Pod{}, &example.Pod{}
	h.apply("a", watch.Event{Type: watch.Added, Object: v1}, start)
	h.apply("a", watch.Event{Type: watch.Modified, Object: v2}, start.Add(time.Second))
	if h.objects["a"] != v2 {
		t.Fatal("the newest object of a key is not the one held")
	}
	if got := h.events[h.head+1].prev; got != v1 {
		t.Fatalf("an update's event holds %p as its previous object, want %p", got, v1)
	}
	for i := range 30 {
		h.apply("b", watch.Event{Type: watch.Modified, Object: &example.Pod{}}, start.Add(time.Duration(2+i)*time.Second))
	}
	// At start+31s the window holds the events of 21s..31s: 11 of them.
	if got := len(h.events) - h.head; got != 11 {
		t.Errorf("%d events held, want the 11 of the last 10s", got)
	}
	for _, e := range h.events[len(h.events):cap(h.events)] {
		if e.obj != nil {
			t.Fatal("an event let go of is still referenced past the queue's end")
		}
	}
	h.apply("a", watch.Event{Type: watch.Deleted, Object: v2}, start.Add(32*time.Second))
	if _, ok := h.objects["a"]; ok {
		t.Error("a deleted key still holds an object")
	}
}
