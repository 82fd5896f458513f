package watchlist

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"
)

func bookmark() *example.Pod { return &example.Pod{} }

func marked(t *testing.T, obj runtime.Object) bool {
	t.Helper()
	ok, err := storage.HasInitialEventsEndBookmarkAnnotation(obj)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func TestNewTracker(t *testing.T) {
	tests := []struct {
		floor     uint64
		want      State
		wantReach bool
	}{
		{0, BookmarkSent, true},
		{1, WaitingForBookmark, false},
		{500, WaitingForBookmark, false},
	}
	for _, tc := range tests {
		tr := NewTracker(tc.floor)
		if tr.State() != tc.want || tr.FloorReached() != tc.wantReach || tr.Floor() != tc.floor {
			t.Errorf("NewTracker(%d) = %v reached=%v floor=%d, want %v reached=%v", tc.floor, tr.State(), tr.FloorReached(), tr.Floor(), tc.want, tc.wantReach)
		}
	}
	var zero Tracker
	if zero.State() != WaitingForBookmark || zero.Floor() != 0 {
		t.Fatalf("zero Tracker: %v floor %d", zero.State(), zero.Floor())
	}
}

// Each step offers a bookmark at rv (Accept), and when accepted, sends it.
func TestTrackerSequences(t *testing.T) {
	type step struct {
		rv         uint64
		wantAccept bool
		wantMarker bool
		wantState  State
	}
	tests := []struct {
		name  string
		floor uint64
		steps []step
	}{
		{
			name:  "plain watch: every bookmark passes, none is marked",
			floor: 0,
			steps: []step{{5, true, false, BookmarkSent}, {6, true, false, BookmarkSent}},
		},
		{
			name:  "bookmarks below the floor are refused and change nothing",
			floor: 100,
			steps: []step{
				{50, false, false, WaitingForBookmark},
				{99, false, false, WaitingForBookmark},
				{100, true, true, BookmarkSent},
				{120, true, false, BookmarkSent},
			},
		},
		{
			name:  "the first bookmark above the floor carries the marker",
			floor: 100,
			steps: []step{{150, true, true, BookmarkSent}, {150, true, false, BookmarkSent}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTracker(tc.floor)
			for i, s := range tc.steps {
				if got := tr.Accept(s.rv); got != s.wantAccept {
					t.Fatalf("step %d: Accept(%d) = %v, want %v", i, s.rv, got, s.wantAccept)
				}
				if s.wantAccept {
					obj := bookmark()
					gotMarker, err := tr.Sent(obj)
					if err != nil {
						t.Fatalf("step %d: Sent: %v", i, err)
					}
					if gotMarker != s.wantMarker || marked(t, obj) != s.wantMarker {
						t.Fatalf("step %d: marker reported %v, on object %v, want %v", i, gotMarker, marked(t, obj), s.wantMarker)
					}
				}
				if tr.State() != s.wantState {
					t.Fatalf("step %d: state %v, want %v", i, tr.State(), s.wantState)
				}
			}
		})
	}
}

// Between Accept and Sent the watcher is in BookmarkReceived: its bookmark is
// queued but the client does not have it yet.
func TestTrackerReceivedUntilSent(t *testing.T) {
	tr := NewTracker(10)
	if !tr.Accept(10) {
		t.Fatal("bookmark at the floor refused")
	}
	if tr.State() != BookmarkReceived || !tr.FloorReached() {
		t.Fatalf("after Accept: %v reached=%v", tr.State(), tr.FloorReached())
	}
	// A second bookmark queued before the first is sent keeps the state.
	if !tr.Accept(11) || tr.State() != BookmarkReceived {
		t.Fatalf("second Accept: %v", tr.State())
	}
	first, second := bookmark(), bookmark()
	if ok, err := tr.Sent(first); !ok || err != nil {
		t.Fatalf("first Sent = %v, %v", ok, err)
	}
	if ok, err := tr.Sent(second); ok || err != nil || marked(t, second) {
		t.Fatalf("second Sent = %v, %v, marked %v: only one bookmark may end the initial events", ok, err, marked(t, second))
	}
}

func TestTrackerRefusesIllegalTransitions(t *testing.T) {
	tr := NewTracker(10)
	obj := bookmark()
	if ok, err := tr.Sent(obj); ok || err == nil {
		t.Fatalf("Sent while waiting = %v, %v; want an error", ok, err)
	}
	if tr.State() != WaitingForBookmark || marked(t, obj) {
		t.Fatalf("illegal Sent changed things: %v, marked %v", tr.State(), marked(t, obj))
	}
	// Existing annotations survive the marker.
	tr.Accept(10)
	obj = &example.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"a": "b"}}}
	if _, err := tr.Sent(obj); err != nil {
		t.Fatal(err)
	}
	if obj.Annotations["a"] != "b" || !marked(t, obj) {
		t.Fatalf("annotations after marking: %v", obj.Annotations)
	}
	// No way back.
	if tr.Accept(5) || tr.State() != BookmarkSent {
		t.Fatalf("after sent: Accept(5) should be refused by the floor and the state stay BookmarkSent, got %v", tr.State())
	}
}

func TestTrackerSentOnObjectWithoutMeta(t *testing.T) {
	tr := NewTracker(1)
	tr.Accept(1)
	if _, err := tr.Sent(&runtime.Unknown{}); err == nil {
		t.Fatal("Sent on an object without metadata: want an error")
	}
	if tr.State() != BookmarkReceived {
		t.Fatalf("failed Sent moved the state to %v", tr.State())
	}
}

func TestStateString(t *testing.T) {
	for s, want := range map[State]string{WaitingForBookmark: "WaitingForBookmark", BookmarkReceived: "BookmarkReceived", BookmarkSent: "BookmarkSent", State(7): "State(7)"} {
		if s.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(s), s.String(), want)
		}
	}
}

// Delivered is Sent for a marker annotated when it was built: it moves the
// watcher on once, without touching any object.
func TestTrackerDelivered(t *testing.T) {
	for _, tc := range []struct {
		name   string
		accept []uint64
		want   bool
		state  State
	}{
		{"waiting", nil, false, WaitingForBookmark},
		{"below the floor", []uint64{9}, false, WaitingForBookmark},
		{"received", []uint64{10}, true, BookmarkSent},
		{"received twice", []uint64{10, 12}, true, BookmarkSent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTracker(10)
			for _, rv := range tc.accept {
				tr.Accept(rv)
			}
			if got := tr.Delivered(); got != tc.want || tr.State() != tc.state {
				t.Fatalf("Delivered = %v in %v, want %v in %v", got, tr.State(), tc.want, tc.state)
			}
			if tr.Delivered() {
				t.Fatal("a second Delivered moved the watcher again")
			}
		})
	}
}
