package cacher

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/watch"
)

// A watch from before the history gets a 410 whose message names the
// oldest RV it could have resumed from as upstream's cache names it
// (resumableFromLocked): once events were evicted, the RV just before the
// oldest event held, or the cache's RV when none is held. (While nothing
// was, it is the list's RV, the history's start; a resume from before the
// list first waits for a backfill, so that case is slow to test.)
// Kubernetes' conformance suite (WatchResync) checks the message.
func TestExpiredWatchNamesTheOldestResumableRV(t *testing.T) {
	for _, tc := range []struct {
		name string
		// drop: the history is cut through this RV (0: not cut).
		drop uint64
		// progress: then a progress notification moves the cache's RV.
		progress uint64
		want     uint64
	}{
		// Events at 101, 105 and 106: cut through 101, the history still
		// covers (101, 106], but 105 is the oldest event it holds.
		{name: "events evicted", drop: 101, want: 104},
		{name: "every event evicted", drop: 106, want: 106},
		{name: "every event evicted, the cache's RV moved since", drop: 106, progress: 110, want: 110},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFakeStorage(100)
			c := newTestCacher(t, fs, nil)
			c.waitReady(t)
			sw, _ := fs.waitWatch(t, 1)
			for _, rv := range []uint64{101, 105, 106} {
				sw.send(t, watch.Added, newTestPod(podName(int(rv)), rv, nil, ""))
			}
			c.waitRV(t, 106)
			if tc.drop > 0 {
				c.DropHistoryThrough(tc.drop)
			}
			if tc.progress > 0 {
				sw.sendBookmark(t, tc.progress)
				c.waitRV(t, tc.progress)
			}
			w := c.startWatch(t, context.Background(), "50", everything(false))
			s := errorStatus(t, nextEvent(t, w))
			if want := fmt.Sprintf("too old resource version: 50 (%d)", tc.want); s.Code != 410 || s.Message != want {
				t.Errorf("got %d %q, want 410 %q", s.Code, s.Message, want)
			}
		})
	}
}
