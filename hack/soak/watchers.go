package main

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/v1alpha1"
	clientset "github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/generated/clientset/versioned"
)

const initialEventsEnd = "k8s.io/initial-events-end"

// backoff is a client's pause before retrying, jittered so thousands of
// watchers do not retry in step.
func backoff(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(500*time.Millisecond + rand.N(1500*time.Millisecond)):
	}
}

func widgetKey(keys *keyTable, obj runtime.Object) (int32, uint64, bool) {
	w, ok := obj.(*v1alpha1.Widget)
	if !ok {
		return 0, 0, false
	}
	return keys.id(w.Namespace + "/" + w.Name), parseRV(w.ResourceVersion), true
}

func eventType(t watch.EventType) uint8 {
	switch t {
	case watch.Added:
		return evAdded
	case watch.Modified:
		return evModified
	case watch.Deleted:
		return evDeleted
	}
	return 0
}

// plainWatcher is a client that lists once, then watches, resuming from its
// last event or bookmark whenever a stream ends, and lists again only when
// the server answers 410: what a careful hand-written client does.
func plainWatcher(ctx context.Context, cs clientset.Interface, keys *keyTable, r *watcherRec, st *stats, stopping func() bool) {
	widgets := cs.DemoV1alpha1().Widgets(r.spec.ns)
	sel := metav1.ListOptions{LabelSelector: r.spec.labelStr, FieldSelector: r.spec.fieldStr}
	needList, listed := true, false
	var known string
	for ctx.Err() == nil {
		if needList {
			l, err := widgets.List(ctx, sel) // consistent: RV ""
			if err != nil {
				if ctx.Err() == nil {
					st.noteError("list", err)
					backoff(ctx)
				}
				continue
			}
			items := make([]item, 0, len(l.Items))
			for i := range l.Items {
				items = append(items, item{key: keys.id(l.Items[i].Namespace + "/" + l.Items[i].Name), rv: parseRV(l.Items[i].ResourceVersion)})
			}
			r.addState(parseRV(l.ResourceVersion), items)
			if listed {
				st.relists.Add(1)
			}
			listed, needList, known = true, false, l.ResourceVersion
		}
		opts := sel
		opts.ResourceVersion, opts.AllowWatchBookmarks = known, true
		timeout := int64(30 + rand.IntN(90))
		opts.TimeoutSeconds = &timeout
		w, err := widgets.Watch(ctx, opts)
		if err != nil {
			switch {
			case ctx.Err() != nil:
			case isGone(err):
				st.gone.Add(1)
				needList = true
			default:
				st.noteError("watch", err)
				backoff(ctx)
			}
			continue
		}
		st.streams.Add(1)
		seg := r.beginStream(parseRV(known))
		for ev := range w.ResultChan() {
			switch ev.Type {
			case watch.Added, watch.Modified, watch.Deleted:
				key, rv, ok := widgetKey(keys, ev.Object)
				if !ok {
					continue
				}
				seg.event(eventType(ev.Type), key, rv)
				r.acked(seg)
				st.delivered.Add(1)
				known = strconvRV(rv, known)
			case watch.Bookmark:
				if _, rv, ok := widgetKey(keys, ev.Object); ok {
					seg.bookmark(rv)
					r.acked(seg)
					st.bookmarks.Add(1)
					known = strconvRV(rv, known)
				}
			case watch.Error:
				err := apierrors.FromObject(ev.Object)
				if isGone(err) {
					st.gone.Add(1)
					needList = true
				} else if !stopping() {
					st.noteError("stream", err)
				}
			}
		}
		w.Stop()
		r.endStream(seg, stopping())
	}
}

// strconvRV is rv as a resourceVersion, unless it is older than known (a
// client resumes from the newest RV it has).
func strconvRV(rv uint64, known string) string {
	if rv < parseRV(known) {
		return known
	}
	return uintString(rv)
}

// informer is a client-go shared informer on the watcher's spec. With
// client-go's WatchListClient on (the default), its reflector starts, and
// starts over after a 410, with a WatchList stream; between, it resumes
// plain watches from its last RV. Every list and watch its reflector makes
// goes through a tap that records what the server sent.
func informer(ctx context.Context, cs clientset.Interface, keys *keyTable, r *watcherRec, st *stats, stopping func() bool, wg *sync.WaitGroup) cache.SharedIndexInformer {
	widgets := cs.DemoV1alpha1().Widgets(r.spec.ns)
	var mu sync.Mutex
	states := 0
	noteState := func(rv uint64, items []item) {
		r.addState(rv, items)
		mu.Lock()
		if states > 0 {
			st.relists.Add(1)
		}
		states++
		mu.Unlock()
	}
	var pending []item // a paged LIST's items so far
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
			options.LabelSelector, options.FieldSelector = r.spec.labelStr, r.spec.fieldStr
			l, err := widgets.List(ctx, options)
			if err != nil {
				if isGone(err) {
					st.gone.Add(1)
				} else if ctx.Err() == nil {
					st.noteError("informer-list", err)
				}
				return l, err
			}
			mu.Lock()
			if options.Continue == "" {
				pending = nil
			}
			for i := range l.Items {
				pending = append(pending, item{key: keys.id(l.Items[i].Namespace + "/" + l.Items[i].Name), rv: parseRV(l.Items[i].ResourceVersion)})
			}
			done, items := l.Continue == "", pending
			mu.Unlock()
			if done {
				noteState(parseRV(l.ResourceVersion), items)
			}
			return l, nil
		},
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			options.LabelSelector, options.FieldSelector = r.spec.labelStr, r.spec.fieldStr
			w, err := widgets.Watch(ctx, options)
			if err != nil {
				if isGone(err) {
					st.gone.Add(1)
				} else if ctx.Err() == nil {
					st.noteError("informer-watch", err)
				}
				return nil, err
			}
			st.streams.Add(1)
			listing := options.SendInitialEvents != nil && *options.SendInitialEvents
			return newTap(w, keys, r, st, listing, parseRV(options.ResourceVersion), noteState, stopping), nil
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &v1alpha1.Widget{}, 0, cache.Indexers{})
	wg.Go(func() { inf.RunWithContext(ctx) })
	return inf
}

// tap passes a watch through to the reflector and records it.
type tap struct {
	inner   watch.Interface
	out     chan watch.Event
	stopped chan struct{}
	once    sync.Once
}

func newTap(inner watch.Interface, keys *keyTable, r *watcherRec, st *stats, listing bool, from uint64,
	noteState func(uint64, []item), stopping func() bool) *tap {
	t := &tap{inner: inner, out: make(chan watch.Event), stopped: make(chan struct{})}
	go func() {
		defer close(t.out)
		var seg *segment
		if !listing {
			seg = r.beginStream(from)
		}
		defer func() {
			if seg != nil {
				r.endStream(seg, stopping())
			}
		}()
		var initial []item
		for ev := range inner.ResultChan() {
			switch {
			case ev.Type == watch.Error:
				err := apierrors.FromObject(ev.Object)
				if isGone(err) {
					st.gone.Add(1)
				} else if !stopping() {
					st.noteError("informer-stream", err)
				}
			case listing && ev.Type == watch.Added:
				if key, rv, ok := widgetKey(keys, ev.Object); ok {
					initial = append(initial, item{key: key, rv: rv})
				}
			case listing && ev.Type == watch.Bookmark:
				w, ok := ev.Object.(*v1alpha1.Widget)
				if ok && w.Annotations[initialEventsEnd] == "true" {
					// The state is complete: the stream goes on from its RV.
					rv := parseRV(w.ResourceVersion)
					noteState(rv, initial)
					listing, initial = false, nil
					seg = r.beginStream(rv)
				}
			case listing:
				// Nothing but ADDED and bookmarks comes before the end of
				// the initial events; a stream that says otherwise is
				// recorded as a stream of its own, for the checker to judge.
				seg = r.beginStream(from)
				listing = false
				fallthrough
			default:
				key, rv, ok := widgetKey(keys, ev.Object)
				if !ok {
					break
				}
				if ev.Type == watch.Bookmark {
					seg.bookmark(rv)
					st.bookmarks.Add(1)
				} else {
					seg.event(eventType(ev.Type), key, rv)
					st.delivered.Add(1)
				}
				r.acked(seg)
			}
			select {
			case t.out <- ev:
			case <-t.stopped:
				return
			}
		}
	}()
	return t
}

func (t *tap) ResultChan() <-chan watch.Event { return t.out }

func (t *tap) Stop() {
	t.once.Do(func() {
		close(t.stopped)
		t.inner.Stop()
	})
}
