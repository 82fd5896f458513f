package main

import (
	"strings"
	"testing"
)

// list is a podList at rv from "key node@rv" triples.
func list(rv uint64, pods ...any) *podList {
	l := newPodList(rv)
	for i := 0; i+2 < len(pods); i += 3 {
		l.add(pods[i].(string), pods[i+1].(string), uint64(pods[i+2].(int)))
	}
	return l
}

// view is a kubelet's view synced to progress, from "key rv" pairs.
func view(progress uint64, pods ...any) kubeletView {
	v := kubeletView{pods: map[string]uint64{}, progress: progress}
	for i := 0; i+1 < len(pods); i += 2 {
		v.pods[pods[i].(string)] = uint64(pods[i+1].(int))
	}
	return v
}

func TestCompareViewUnderOngoingWrites(t *testing.T) {
	for _, tc := range []struct {
		name          string
		v             kubeletView
		before, after *podList
		want          viewVerdict
		// The message names these (the pod, the RVs, the list's and the
		// kubelet's progress).
		says []string
	}{
		{name: "equal", v: view(100, "ns/a", 90), before: list(100, "ns/a", "n1", 90), want: viewConsistent},
		// The kubelet holds a pod at a newer RV than the list taken a
		// moment before, and one created since: not a difference (the
		// 1,000-node run's false alarm: 169334 held, 162816 listed).
		{name: "ahead", v: view(169400, "ns/a", 169334, "ns/b", 169390), before: list(169000, "ns/a", "n1", 162816),
			after: list(169500, "ns/a", "n1", 169334, "ns/b", "n1", 169390), want: viewConsistent},
		{name: "pods of other nodes ignored", v: view(100), before: list(100, "ns/x", "n2", 90, "ns/y", "", 95), want: viewConsistent},
		{name: "behind on an update", v: view(85, "ns/a", 80), before: list(100, "ns/a", "n1", 90), want: viewBehind,
			says: []string{"ns/a", "rv 80", "list's 90", "list at 100", "synced to 85"}},
		{name: "behind on an add", v: view(85), before: list(100, "ns/a", "n1", 90), want: viewBehind,
			says: []string{"ns/a", "rv 90", "list at 100", "synced to 85"}},
		{name: "behind on a delete", v: view(95, "ns/a", 80), before: list(100), want: viewBehind,
			says: []string{"ns/a", "rv 80", "list at 100", "synced to 95"}},
		// Past the list, the pod is gone from the kubelet: deleted after
		// the list (the list after the view agrees, or there is none yet).
		{name: "missing, deleted after the list", v: view(120), before: list(100, "ns/a", "n1", 90), after: list(130), want: viewConsistent},
		{name: "missing, deleted after the list, no list after", v: view(120), before: list(100, "ns/a", "n1", 90), want: viewConsistent},
		{name: "created after the kubelet's progress", v: view(120), before: list(100), after: list(130, "ns/b", "n1", 125), want: viewConsistent},
		// Lost events.
		{name: "lost add, synced past the item", v: view(95), before: list(100, "ns/a", "n1", 90), want: viewWrong,
			says: []string{"lost add", "ns/a", "rv 90", "list at 100", "synced to 95"}},
		{name: "lost add, still there after", v: view(120), before: list(100, "ns/a", "n1", 90), after: list(130, "ns/a", "n1", 90), want: viewWrong,
			says: []string{"lost add", "ns/a", "rv 90", "list at 130", "before at 100", "synced to 120"}},
		{name: "lost add of a pod created after the list", v: view(120), before: list(100), after: list(130, "ns/b", "n1", 110), want: viewWrong,
			says: []string{"lost add", "ns/b", "rv 110", "list at 130", "synced to 120"}},
		{name: "lost update", v: view(95, "ns/a", 80), before: list(100, "ns/a", "n1", 90), want: viewWrong,
			says: []string{"lost update", "ns/a", "rv 80", "list's 90", "list at 100", "synced to 95"}},
		{name: "lost update after the list", v: view(120, "ns/a", 90), before: list(100, "ns/a", "n1", 90), after: list(130, "ns/a", "n1", 110), want: viewWrong,
			says: []string{"lost update", "ns/a", "rv 90", "list's 110", "list at 130", "synced to 120"}},
		{name: "lost delete", v: view(100, "ns/a", 80), before: list(100), want: viewWrong,
			says: []string{"lost delete", "ns/a", "rv 80", "not in the list", "list at 100", "synced to 100"}},
		// Recreated under the same name on another node by the list: the
		// delete of the kubelet's pod is lost all the same.
		{name: "lost delete, the name on another node", v: view(120, "ns/a", 80), before: list(100, "ns/a", "n2", 95), want: viewWrong,
			says: []string{"lost delete", "ns/a", "rv 80", `on node "n2" in the list at rv 95`, "synced to 120"}},
		// The worst verdict wins, whatever the order of the pods.
		{name: "wrong beats behind", v: view(95, "ns/a", 80, "ns/z", 50), before: list(100, "ns/a", "n1", 97, "ns/z", "n1", 90), want: viewWrong,
			says: []string{"lost update", "ns/z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := compareView("n1", tc.v, tc.before, tc.after)
			if got != tc.want {
				t.Fatalf("verdict %v (%s), want %v", got, why, tc.want)
			}
			if got == viewConsistent && why != "" {
				t.Errorf("consistent, yet says %q", why)
			}
			for _, s := range tc.says {
				if !strings.Contains(why, s) {
					t.Errorf("%q does not say %q", why, s)
				}
			}
		})
	}
}
