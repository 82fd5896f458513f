package main

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/v1alpha1"
	v1alpha1client "github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/generated/clientset/versioned/typed/demo/v1alpha1"
)

const initialEventsEnd = "k8s.io/initial-events-end"

// rewindWindow is how far back a rewinding watcher may resume from: far
// inside both caches' history, so a rewind tests resumption, not 410s.
const rewindWindow = 20 * time.Second

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
// last event or bookmark whenever a stream ends (and lists again only when
// the server answers 410): what a careful hand-written client does. It
// talks to its home replica; when a connection breaks (an error, or a
// stream the server ended before its timeout) it goes on with the next
// replica, resuming there.
//
// With probability rewind a resume starts not from the last RV but from an
// earlier one the stream delivered (an event's or a bookmark's, of its last
// rewindWindow, well inside the history window): a watch must resume from
// any RV it was given.
func plainWatcher(ctx context.Context, set *replicaSet, home int, keys *keyTable, r *watcherRec, st *stats, stopping func() bool, rewind float64) {
	sel := metav1.ListOptions{LabelSelector: r.spec.labelStr, FieldSelector: r.spec.fieldStr}
	type rvAt struct {
		rv uint64
		at time.Time
	}
	var recent []rvAt // the stream's last RVs, for a rewind
	delivered := func(rv uint64) {
		if len(recent) == 64 {
			recent = append(recent[:0], recent[1:]...)
		}
		recent = append(recent, rvAt{rv, time.Now()})
	}
	needList, listed := true, false
	var known string
	cur, lastStream, resuming := home, -1, false
	for ctx.Err() == nil {
		at, cs, ok := set.client(cur)
		if !ok {
			backoff(ctx)
			continue
		}
		cur = at
		widgets := cs.DemoV1alpha1().Widgets(r.spec.ns)
		if needList {
			l, err := widgets.List(ctx, sel) // consistent: RV ""
			if err != nil {
				if ctx.Err() == nil {
					st.noteError("list", err)
					cur = set.next(cur)
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
			listed, needList, known, resuming = true, false, l.ResourceVersion, false
		}
		opts := sel
		opts.ResourceVersion, opts.AllowWatchBookmarks = known, true
		timeout := int64(30 + rand.IntN(90))
		opts.TimeoutSeconds = &timeout
		opened := time.Now()
		w, err := widgets.Watch(ctx, opts)
		if err != nil {
			switch {
			case ctx.Err() != nil:
			case isGone(err):
				st.noteGone(resuming)
				needList = true
			default:
				st.noteError("watch", err)
				cur = set.next(cur)
				backoff(ctx)
			}
			continue
		}
		st.streams.Add(1)
		if resuming && lastStream >= 0 && cur != lastStream {
			st.resumedElsewhere.Add(1)
		}
		lastStream = cur
		gone := false
		recent = recent[:0]
		seg := r.beginStream(parseRV(known))
		for ev := range w.ResultChan() {
			switch ev.Type {
			case watch.Added, watch.Modified, watch.Deleted:
				key, rv, ok := widgetKey(keys, ev.Object)
				if !ok {
					continue
				}
				switch {
				case take(&planted.dropEvent):
					logf("planted bug: watcher %v's record drops %s@%d", r.spec, ev.Type, rv)
				case take(&planted.repeatEvent):
					logf("planted bug: watcher %v's record holds %s@%d twice", r.spec, ev.Type, rv)
					seg.event(eventType(ev.Type), key, rv)
					fallthrough
				default:
					seg.event(eventType(ev.Type), key, rv)
				}
				r.acked(seg)
				st.delivered.Add(1)
				known = strconvRV(rv, known)
				delivered(rv)
			case watch.Bookmark:
				if _, rv, ok := widgetKey(keys, ev.Object); ok {
					seg.bookmark(rv)
					r.acked(seg)
					st.bookmarks.Add(1)
					known = strconvRV(rv, known)
					delivered(rv)
				}
			case watch.Error:
				err := apierrors.FromObject(ev.Object)
				if isGone(err) {
					st.noteGone(resuming)
					needList, gone = true, true
				} else if !stopping() {
					st.noteError("stream", err)
				}
			}
		}
		w.Stop()
		r.endStream(seg, stopping())
		resuming = true
		if !gone && rewind > 0 && rand.Float64() < rewind {
			var fresh []uint64
			for _, x := range recent {
				if time.Since(x.at) < rewindWindow && x.rv < parseRV(known) {
					fresh = append(fresh, x.rv)
				}
			}
			if len(fresh) > 0 {
				known = uintString(fresh[rand.IntN(len(fresh))])
				st.rewinds.Add(1)
			}
		}
		// A stream that ends well before its timeout, with no 410, was
		// ended by the server or its connection broke: resume elsewhere.
		if !gone && ctx.Err() == nil && !stopping() && time.Since(opened) < time.Duration(timeout-2)*time.Second {
			st.endedEarly.Add(1)
			cur = set.next(cur)
		}
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
// goes through a tap that records what the server sent. Like a plain
// watcher, it talks to its home replica and goes on with the next one when
// a connection breaks.
func informer(ctx context.Context, set *replicaSet, home int, keys *keyTable, r *watcherRec, st *stats, stopping func() bool, wg *sync.WaitGroup) cache.SharedIndexInformer {
	var mu sync.Mutex
	states := 0
	cur, lastStream := home, -1
	noteState := func(rv uint64, items []item, watchList bool, preEnd []recEvent) {
		if watchList {
			r.addWatchListState(rv, items, preEnd, true)
		} else {
			r.addState(rv, items)
		}
		mu.Lock()
		if states > 0 {
			st.relists.Add(1)
		}
		states++
		mu.Unlock()
	}
	// widgets is the current replica's client (the next one up when it is
	// down), and where it is.
	widgets := func() (int, v1alpha1client.WidgetInterface, error) {
		mu.Lock()
		defer mu.Unlock()
		at, cs, ok := set.client(cur)
		if !ok {
			return cur, nil, errors.New("no replica up")
		}
		cur = at
		return at, cs.DemoV1alpha1().Widgets(r.spec.ns), nil
	}
	failover := func(from int) {
		mu.Lock()
		if cur == from {
			cur = set.next(cur)
		}
		mu.Unlock()
	}
	var pending []item // a paged LIST's items so far
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
			options.LabelSelector, options.FieldSelector = r.spec.labelStr, r.spec.fieldStr
			at, widgets, err := widgets()
			if err != nil {
				return nil, err
			}
			l, err := widgets.List(ctx, options)
			if err != nil {
				if isGone(err) {
					st.noteGone(false)
				} else if ctx.Err() == nil {
					st.noteError("informer-list", err)
					failover(at)
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
				noteState(parseRV(l.ResourceVersion), items, false, nil)
			}
			return l, nil
		},
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			options.LabelSelector, options.FieldSelector = r.spec.labelStr, r.spec.fieldStr
			listing := options.SendInitialEvents != nil && *options.SendInitialEvents
			resuming := !listing && options.ResourceVersion != "" && options.ResourceVersion != "0"
			at, widgets, err := widgets()
			if err != nil {
				return nil, err
			}
			opened := time.Now()
			w, err := widgets.Watch(ctx, options)
			if err != nil {
				if isGone(err) {
					st.noteGone(resuming)
				} else if ctx.Err() == nil {
					st.noteError("informer-watch", err)
					failover(at)
				}
				return nil, err
			}
			st.streams.Add(1)
			mu.Lock()
			if resuming && lastStream >= 0 && at != lastStream {
				st.resumedElsewhere.Add(1)
			}
			lastStream = at
			mu.Unlock()
			var deadline time.Time
			if options.TimeoutSeconds != nil {
				deadline = opened.Add(time.Duration(*options.TimeoutSeconds-2) * time.Second)
			}
			onEnd := func(gone, stoppedByClient bool) {
				if !gone && !stoppedByClient && ctx.Err() == nil && !stopping() && (deadline.IsZero() || time.Now().Before(deadline)) {
					st.endedEarly.Add(1)
					failover(at)
				}
			}
			return newTap(w, keys, r, st, listing, resuming, parseRV(options.ResourceVersion), noteState, stopping, onEnd), nil
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

func newTap(inner watch.Interface, keys *keyTable, r *watcherRec, st *stats, listing, resuming bool, from uint64,
	noteState func(uint64, []item, bool, []recEvent), stopping func() bool, onEnd func(gone, stoppedByClient bool)) *tap {
	t := &tap{inner: inner, out: make(chan watch.Event), stopped: make(chan struct{})}
	go func() {
		defer close(t.out)
		gone := false
		defer func() {
			select {
			case <-t.stopped:
				onEnd(gone, true)
			default:
				onEnd(gone, false)
			}
		}()
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
		var preEnd []recEvent // what came before the end bookmark that is no ADDED
		defer func() {
			if listing && len(preEnd) > 0 {
				r.addWatchListState(0, initial, preEnd, false)
			}
		}()
		for ev := range inner.ResultChan() {
			switch {
			case ev.Type == watch.Error:
				err := apierrors.FromObject(ev.Object)
				if isGone(err) {
					st.noteGone(resuming)
					gone = true
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
					noteState(rv, initial, true, preEnd)
					listing, initial, preEnd = false, nil, nil
					seg = r.beginStream(rv)
				}
			case listing:
				// Nothing but ADDED and bookmarks may come before the end
				// of the initial events: what does is kept for the checker.
				if key, rv, ok := widgetKey(keys, ev.Object); ok {
					preEnd = append(preEnd, recEvent{rv: rv, key: key, typ: eventType(ev.Type)})
				}
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
