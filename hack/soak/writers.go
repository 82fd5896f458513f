package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/v1alpha1"
)

// What the writers vary, and the watchers select on: every widget is
// app=soak, in one of soakNamespaces namespaces, with a shard and a tier
// label, a node and a color; updates move widgets between all of them, so
// watchers see objects enter (ADDED) and leave (DELETED) their selectors as
// well as change within them.
const (
	soakNamespaces = 4
	soakShards     = 8
	soakNodes      = 4
)

var (
	soakTiers  = []string{"a", "b", "c"}
	soakColors = []v1alpha1.WidgetColor{v1alpha1.WidgetColorRed, v1alpha1.WidgetColorGreen, v1alpha1.WidgetColorBlue}
)

func soakNamespace(i int) string { return fmt.Sprintf("soak-%d", i) }

func uintString(v uint64) string { return strconv.FormatUint(v, 10) }

func randomize(w *v1alpha1.Widget, all bool) {
	if w.Labels == nil {
		w.Labels = map[string]string{"app": "soak"}
	}
	if all || rand.IntN(2) == 0 {
		w.Labels["shard"] = "s" + strconv.Itoa(rand.IntN(soakShards))
	}
	if all || rand.IntN(3) == 0 {
		w.Labels["tier"] = soakTiers[rand.IntN(len(soakTiers))]
	}
	if all || rand.IntN(3) == 0 {
		w.Spec.NodeName = "node-" + strconv.Itoa(rand.IntN(soakNodes))
	}
	if all || rand.IntN(3) == 0 {
		w.Spec.Color = soakColors[rand.IntN(len(soakColors))]
	}
	w.Spec.Size = int32(1 + rand.IntN(1000))
}

// writer creates, updates and deletes its own widgets, one write per token.
// It owns them, so its writes never conflict with another writer's; after
// an error (etcd may be down) it reads the widget back before writing it
// again, as the write may have happened. It writes through its home
// replica, and through the next one after an error.
func writer(ctx context.Context, set *replicaSet, home, id, objects int, tokens <-chan struct{}, st *stats) {
	type owned struct {
		ns, name string
		obj      *v1alpha1.Widget // nil: absent
		unknown  bool
	}
	objs := make([]owned, objects)
	for j := range objs {
		objs[j] = owned{ns: soakNamespace(j % soakNamespaces), name: fmt.Sprintf("w%02d-%03d", id, j)}
	}
	cur := home
	for {
		select {
		case <-ctx.Done():
			return
		case <-tokens:
		}
		at, cs, ok := set.client(cur)
		if !ok {
			continue
		}
		cur = at
		o := &objs[rand.IntN(objects)]
		widgets := cs.DemoV1alpha1().Widgets(o.ns)
		var err error
		switch {
		case o.unknown:
			var got *v1alpha1.Widget
			got, err = widgets.Get(ctx, o.name, metav1.GetOptions{})
			switch {
			case err == nil:
				o.obj, o.unknown = got, false
			case apierrors.IsNotFound(err):
				o.obj, o.unknown, err = nil, false, nil
			}
			if err != nil {
				st.writeErrs.Add(1)
				cur = set.next(cur)
			}
			continue
		case o.obj == nil:
			w := &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: o.ns, Name: o.name}}
			randomize(w, true)
			o.obj, err = widgets.Create(ctx, w, metav1.CreateOptions{})
		case rand.IntN(4) == 0:
			rv := o.obj.ResourceVersion
			err = widgets.Delete(ctx, o.name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
			if err == nil {
				o.obj = nil
			}
		default:
			w := o.obj.DeepCopy()
			randomize(w, false)
			o.obj, err = widgets.Update(ctx, w, metav1.UpdateOptions{})
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			st.writeErrs.Add(1)
			o.obj, o.unknown = nil, true
			cur = set.next(cur)
			continue
		}
		st.writes.Add(1)
	}
}
