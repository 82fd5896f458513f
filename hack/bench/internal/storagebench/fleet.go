package storagebench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/klog/v2"
)

// fleet is N watches of one storage, each read by its own consumer goroutine
// as a real client's would be. It counts what every scenario reports: which
// watches ended while still being read, and bookmarks.
type fleet struct {
	watches []watch.Interface
	wg      sync.WaitGroup

	// stopping is set before the fleet stops its watches, so the ends it
	// causes are not counted as failures.
	stopping atomic.Bool
	// closed counts watches that ended (channel closed or an Error event)
	// while their consumer was still reading.
	closed     atomic.Int64
	errorsSeen atomic.Int64
	firstErr   atomic.Pointer[string]

	bookmarks atomic.Int64
	// bookmarked counts watches that got at least one bookmark; when it
	// reaches allBookmarkedAt, allBookmarked is closed.
	bookmarked      atomic.Int64
	allBookmarkedAt int64
	allBookmarked   chan struct{}
}

// eventHandler sees one watch's non-bookmark, non-error events, in its
// consumer goroutine; newHandler makes one per watch so it can keep
// per-watch state without locks.
type eventHandler func(watch.Event)

func newFleet(capacity int) *fleet {
	return &fleet{
		watches:         make([]watch.Interface, 0, capacity),
		allBookmarkedAt: int64(capacity),
		allBookmarked:   make(chan struct{}),
	}
}

// openFleet opens a fleet of n watches of s with opts and returns it with
// how long opening took. newHandler, if set, makes each watch's handler. On
// error the watches opened so far are stopped.
func openFleet(ctx context.Context, s storage.Interface, n int, opts storage.ListOptions, newHandler func() eventHandler) (*fleet, time.Duration, error) {
	f := newFleet(n)
	start := time.Now()
	err := f.open(ctx, s, n, opts, newHandler)
	took := time.Since(start)
	if err != nil {
		f.stop()
		return nil, took, err
	}
	return f, took, nil
}

// openForFleet opens the decorator's storage and the options a fleet's
// watches of it open with; destroy releases the storage.
func openForFleet(ctx context.Context, env Env, decorator string) (s storage.Interface, opts storage.ListOptions, destroy func(), err error) {
	s, destroy, err = openStorage(ctx, env, decorator)
	if err != nil {
		return nil, opts, nil, err
	}
	if opts, err = fleetOptions(ctx, s); err != nil {
		destroy()
		return nil, opts, nil, err
	}
	return s, opts, destroy, nil
}

// fleetOptions are what every watch of a fleet asks for: bookmarks, from
// the cache's current resourceVersion so no watch has initial events.
func fleetOptions(ctx context.Context, s storage.Interface) (storage.ListOptions, error) {
	rv, _, err := currentRV(ctx, s)
	if err != nil {
		return storage.ListOptions{}, err
	}
	pred := storage.Everything
	pred.AllowWatchBookmarks = true
	return storage.ListOptions{ResourceVersion: rv, Recursive: true, Predicate: pred}, nil
}

// open starts n watches with opts, one after another as many clients
// arriving would, each with its consumer.
func (f *fleet) open(ctx context.Context, s storage.Interface, n int, opts storage.ListOptions, newHandler func() eventHandler) error {
	return f.openEach(ctx, s, n, func(int) (string, storage.ListOptions) { return resourcePrefix, opts }, newHandler)
}

// openEach is open with a key and options of each watch's own: watch i
// watches args(i).
func (f *fleet) openEach(ctx context.Context, s storage.Interface, n int, args func(i int) (string, storage.ListOptions), newHandler func() eventHandler) error {
	for i := range n {
		key, opts := args(i)
		w, err := s.Watch(ctx, key, opts)
		if err != nil {
			return fmt.Errorf("watch %d of %d: %w", i+1, n, err)
		}
		var h eventHandler
		if newHandler != nil {
			h = newHandler()
		}
		f.watches = append(f.watches, w)
		f.wg.Add(1)
		go f.consume(w, h)
	}
	return nil
}

func (f *fleet) consume(w watch.Interface, h eventHandler) {
	defer f.wg.Done()
	failed, bookmarked := false, false
	for ev := range w.ResultChan() {
		switch ev.Type {
		case watch.Bookmark:
			f.bookmarks.Add(1)
			if !bookmarked {
				bookmarked = true
				if f.bookmarked.Add(1) == f.allBookmarkedAt {
					close(f.allBookmarked)
				}
			}
		case watch.Error:
			if !f.stopping.Load() {
				failed = true
				f.errorsSeen.Add(1)
				msg := apierrors.FromObject(ev.Object).Error()
				f.firstErr.CompareAndSwap(nil, &msg)
			}
		default:
			if h != nil {
				h(ev)
			}
		}
	}
	if failed || !f.stopping.Load() {
		f.closed.Add(1)
	}
}

// stop ends every watch and waits (bounded) for the consumers to finish.
func (f *fleet) stop() {
	f.stopping.Store(true)
	for _, w := range f.watches {
		w.Stop()
	}
	done := make(chan struct{})
	go func() { f.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		klog.InfoS("Some watch consumers did not finish within 30s of Stop", "watches", len(f.watches))
	}
}

// report logs what went wrong, for the run's log; the counts go in results.
func (f *fleet) report() {
	if p := f.firstErr.Load(); p != nil {
		klog.InfoS("Watches got Error events", "count", f.errorsSeen.Load(), "first", *p)
	}
	if n := f.closed.Load(); n > 0 {
		klog.InfoS("Watches ended while being read", "count", n, "of", len(f.watches))
	}
}
