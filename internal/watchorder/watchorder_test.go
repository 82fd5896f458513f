package watchorder

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/watch"
)

type step struct {
	typ watch.EventType
	rv  uint64
}

// Every rule rejects the stream that breaks it, and a stream that keeps
// them all is taken to its end.
func TestReader(t *testing.T) {
	ev := func(rv uint64) step { return step{watch.Modified, rv} }
	bm := func(rv uint64) step { return step{watch.Bookmark, rv} }
	for _, tc := range []struct {
		name    string
		steps   []step
		wantErr string
	}{
		{name: "in order, bookmarks between", steps: []step{bm(100), ev(101), bm(101), ev(102), bm(105), ev(106)}},
		{name: "a bookmark behind the start", steps: []step{bm(99)}, wantErr: "went back behind the event @100"},
		{name: "a bookmark behind the last event", steps: []step{ev(101), ev(102), bm(101)}, wantErr: "went back behind the event @102"},
		{name: "a bookmark ahead of an event", steps: []step{ev(101), bm(102), ev(102)}, wantErr: "the bookmark overtook it"},
		{name: "an event missed", steps: []step{ev(101), ev(106)}, wantErr: "want @102"},
		{name: "an event twice", steps: []step{ev(101), ev(101)}, wantErr: "want @102"},
		{name: "out of order", steps: []step{ev(102)}, wantErr: "want @101"},
		{name: "an error", steps: []step{ev(101), {watch.Error, 0}}, wantErr: "an error after 1 of 3"},
		{name: "one too many", steps: []step{ev(101), ev(102), ev(106), ev(107)}, wantErr: "after all 3 owed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := New(100, []uint64{101, 102, 106})
			var err error
			for _, s := range tc.steps {
				if err = r.Take(s.typ, s.rv); err != nil {
					break
				}
			}
			switch {
			case tc.wantErr == "" && (err != nil || !r.Done()):
				t.Fatalf("err %v, done %v: want the whole stream taken", err, r.Done())
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("err %v, want one with %q", err, tc.wantErr)
			}
		})
	}
}
