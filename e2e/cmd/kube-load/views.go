package main

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
)

// The end-of-run check of the kubelets' pods against the server's, under
// writes that go on while it runs (at 1,000 nodes the pods are still
// starting long after the churn stops). A consistent list is the server's
// pods at one resourceVersion R; a kubelet's view is what its WatchList
// applied up to its progress RV P (the last list, event or bookmark its
// reflector synced), and it may hold pods at RVs above P. So a kubelet may
// be ahead of a list taken a moment before it, or behind it, and neither is
// a lost event; what is, is a state no watch could have left:
//
//   - a pod the list puts on the node at item RV r (that version of it
//     existed from r through R): the kubelet holds it at r or later, or
//     has not got to r yet (P < r: behind); holding it older although
//     P >= r is a lost update, lacking it although r <= P <= R a lost
//     add. Lacking it with P > R is a delete after the list, unless a
//     list taken after the view (at R2 >= P) still has the pod at an item
//     RV at or below P: then it existed at P, a lost add.
//   - a pod the kubelet holds at g that the list does not put on the node:
//     g > R is a pod written after the list; g <= R means it was deleted
//     (or, recreated under the same name, moved) by R, which the kubelet
//     has not heard of: behind while P < R, a lost delete once P >= R.
//
// A kubelet passes once its view, taken between two lists, is consistent
// with both: behind is not yet a failure, it may be catching up.

// podList is a consistent list of pods: its resourceVersion, and each pod's
// node ("" unscheduled) and resourceVersion by namespace/name.
type podList struct {
	rv   uint64
	pods map[string]listedPod
	// onNode is the pods' keys by node: a kubelet's are read without a
	// walk of every pod.
	onNode map[string][]string
}

func newPodList(rv uint64) *podList {
	return &podList{rv: rv, pods: map[string]listedPod{}, onNode: map[string][]string{}}
}

// add puts a pod in the list; a list has each key once.
func (l *podList) add(key, node string, rv uint64) {
	l.pods[key] = listedPod{node: node, rv: rv}
	l.onNode[node] = append(l.onNode[node], key)
}

// keysOn are the keys of node's pods, sorted.
func (l *podList) keysOn(node string) []string {
	return slices.Sorted(slices.Values(l.onNode[node]))
}

type listedPod struct {
	node string
	rv   uint64
}

// kubeletView is a kubelet's pods (namespace/name -> resourceVersion) and
// the RV its reflector has synced to: everything at or below it is applied.
type kubeletView struct {
	pods     map[string]uint64
	progress uint64
}

// viewVerdict is how a kubelet's view stands against a list.
type viewVerdict int

const (
	viewConsistent viewVerdict = iota
	viewBehind                 // not caught up yet: no lost event shown
	viewWrong                  // a lost add, update or delete
)

var viewVerdictNames = [...]string{"consistent", "behind", "wrong"}

func (v viewVerdict) String() string { return viewVerdictNames[v] }

// compareView judges the view v of node's kubelet against before, a list
// taken before the view was read, and after, one taken after it (nil if
// none yet: then a pod missing since before's RV counts as deleted). It
// returns the worst verdict and what shows it: the pod, both RVs, the
// list's RV and the kubelet's progress.
func compareView(node string, v kubeletView, before, after *podList) (viewVerdict, string) {
	worst, why := viewConsistent, ""
	note := func(verdict viewVerdict, format string, args ...any) {
		if verdict > worst {
			worst, why = verdict, fmt.Sprintf(format, args...)
		}
	}
	R, P := before.rv, v.progress
	for _, key := range before.keysOn(node) {
		lp := before.pods[key]
		g, held := v.pods[key]
		switch {
		case held && g >= lp.rv:
		case held && P >= lp.rv:
			note(viewWrong, "lost update: %s at rv %d, the list's %d (list at %d), kubelet synced to %d", key, g, lp.rv, R, P)
		case held:
			note(viewBehind, "behind: %s at rv %d, the list's %d (list at %d), kubelet synced to %d", key, g, lp.rv, R, P)
		case P < lp.rv:
			note(viewBehind, "behind: %s not held, the list's at rv %d (list at %d), kubelet synced to %d", key, lp.rv, R, P)
		case P <= R:
			note(viewWrong, "lost add: %s not held, the list's at rv %d (list at %d), kubelet synced to %d", key, lp.rv, R, P)
		}
		// Not held with P > R: deleted since the list, unless the list
		// after the view shows a version of it current at P (below).
	}
	for _, key := range sortedKeys(v.pods) {
		g := v.pods[key]
		if lp, ok := before.pods[key]; (ok && lp.node == node) || g > R {
			continue
		}
		where := "not in the list"
		if lp, ok := before.pods[key]; ok {
			where = fmt.Sprintf("on node %q in the list at rv %d", lp.node, lp.rv)
		}
		if P >= R {
			note(viewWrong, "lost delete: holds %s at rv %d, %s (list at %d), kubelet synced to %d", key, g, where, R, P)
		} else {
			note(viewBehind, "behind: holds %s at rv %d, %s (list at %d), kubelet synced to %d", key, g, where, R, P)
		}
	}
	if after != nil && after.rv >= P && worst < viewWrong {
		// The version of each pod the list after the view has, current
		// from its item RV through after.rv >= P: one at or below P the
		// kubelet must hold, or a newer one.
		for _, key := range after.keysOn(node) {
			ap := after.pods[key]
			if ap.rv > P {
				continue
			}
			if g, held := v.pods[key]; !held {
				note(viewWrong, "lost add: %s not held, at rv %d in the list at %d (the one before at %d), kubelet synced to %d", key, ap.rv, after.rv, R, P)
			} else if g < ap.rv {
				note(viewWrong, "lost update: %s at rv %d, the list's %d (list at %d), kubelet synced to %d", key, g, ap.rv, after.rv, P)
			}
		}
	}
	return worst, why
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// parseRV reads a resourceVersion as the number etcd's revisions are;
// kube-load runs on etcd only.
func parseRV(rv string) (uint64, error) {
	if rv == "" {
		return 0, nil
	}
	return strconv.ParseUint(rv, 10, 64)
}
