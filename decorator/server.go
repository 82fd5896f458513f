package decorator

import (
	"context"
	"sync"
	"time"

	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/watchkeeper/watchkeeper/options"
)

// What a server that embeds watchkeeper needs beyond the decorator itself:
// the --watch-cache-decorator choice, and ending watches when it stops.
// The sample apiserver and kube-apiserver on watchkeeper (e2e/) share it.

// Choose returns the decorator of --watch-cache-decorator=name:
// watchkeeper's caches configured by opts; upstream's own cacher
// (registry.StorageWithCacher), tracked so that the server checks its
// readiness the same way; or nil for none.
func Choose(name string, opts *options.WatchCacheOptions) (*Decorator, error) {
	if err := options.ValidateDecorator(name); err != nil {
		return nil, err
	}
	switch name {
	case options.DecoratorUpstream:
		return track(genericregistry.StorageWithCacher()), nil
	case options.DecoratorNone:
		return nil, nil
	}
	return NewDecorator(opts)
}

// Install returns delegate with d as the decorator of every resource the
// delegate caches (see RESTOptionsGetter); with d nil (none), every
// resource is served straight from etcd.
func Install(delegate generic.RESTOptionsGetter, d *Decorator) generic.RESTOptionsGetter {
	if d == nil {
		return RESTOptionsGetter(delegate, generic.UndecoratedStorage)
	}
	return RESTOptionsGetter(delegate, d.Decorate)
}

// endWatchesRepeat is how often watches opened after the first endWatches
// of a shutdown are ended.
const endWatchesRepeat = time.Second

// endWatchesOnShutdown makes a server's stop quick with open watches. Once
// ctx ends (the server is told to stop) and after another `after` on clk,
// it ends every watch of d's watchkeeper caches, each after its client read
// what is queued (endWatches), so clients resume from their last event or
// bookmark on another replica at once instead of when the HTTP server's
// shutdown timeout (60s) cuts them off; then, once a second, it ends the
// watches opened since (a client that re-watched before the server stopped
// listening). The caller calls the returned stop when the server has
// stopped; it waits for the goroutine to end.
func (d *Decorator) endWatchesOnShutdown(ctx context.Context, after time.Duration, clk clock.WithTicker) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		select {
		case <-ctx.Done():
		case <-done:
			return
		}
		t := clk.NewTimer(after)
		defer t.Stop()
		select {
		case <-t.C():
		case <-done:
			return
		}
		n := d.endWatches()
		klog.InfoS("Shutting down: ended the watch caches' watches", "watches", n, "after", after)
		tick := clk.NewTicker(endWatchesRepeat)
		defer tick.Stop()
		for {
			select {
			case <-tick.C():
				if n := d.endWatches(); n > 0 {
					klog.V(2).InfoS("Shutting down: ended watches opened since", "watches", n)
				}
			case <-done:
				return
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		<-finished
	}
}

// bookmarkAll has each of d's watchkeeper caches queue every watcher that
// takes bookmarks one at its current RV (cacher.BookmarkAll), all at once,
// and waits until the clients took them or ctx ends. It returns how many
// were queued and taken.
func (d *Decorator) bookmarkAll(ctx context.Context) (queued, taken int) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range d.Caches() {
		wg.Go(func() {
			q, tk := c.BookmarkAll(ctx)
			mu.Lock()
			queued, taken = queued+q, taken+tk
			mu.Unlock()
		})
	}
	wg.Wait()
	return queued, taken
}

// shutdownBookmarkWait bounds how long a stopping server waits for its
// watch clients to read their last bookmark (bookmarkBeforeShutdown): a
// client that keeps up reads it within milliseconds, and one that does
// not must not hold the stop.
const shutdownBookmarkWait = 2 * time.Second

// WatchesOnShutdown is what a server that embeds watchkeeper wires around
// its run, so that its watch clients resume from where it stopped, and at
// once. It returns the context to run the server with: once ctx ends (the
// server is told to stop), that context ends when every watch of d's
// watchkeeper caches that takes bookmarks was sent one at its cache's
// current resourceVersion and its client read it, or a short wait passed,
// so that clients resume from the moment the server stopped instead of
// from their last event or bookmark, up to a bookmark period back. Then,
// `after` that context ends, it ends every watch, each after its client
// read what is queued, and once a second those opened since, so that
// clients re-watch another replica at once instead of when the HTTP
// server's shutdown timeout cuts them off. The caller calls stop when the
// server has stopped; it waits for both steps to end.
func (d *Decorator) WatchesOnShutdown(ctx context.Context, after time.Duration) (run context.Context, stop func()) {
	run, stopBookmarks := d.bookmarkBeforeShutdown(ctx, shutdownBookmarkWait)
	stopEnding := d.endWatchesOnShutdown(run, after, clock.RealClock{})
	return run, func() {
		stopEnding()
		stopBookmarks()
	}
}

// bookmarkBeforeShutdown returns the context to run the server with: it
// ends once ctx ends (the server is told to stop) and d's caches have sent
// every watch a bookmark at their current RV that its client read, or
// `wait` passed. The server's watch handlers return as soon as it stops
// accepting requests; this bookmark comes first, so that clients resume
// from the moment the server stopped instead of from their last event or
// bookmark, up to a minute back (cacher.BookmarkAll says why that matters).
// The caller calls stop when the server has stopped.
func (d *Decorator) bookmarkBeforeShutdown(ctx context.Context, wait time.Duration) (run context.Context, stop func()) {
	run, cancel := context.WithCancel(context.WithoutCancel(ctx))
	// stop ends the wait for the clients at once.
	stopping, stopNow := context.WithCancel(context.Background())
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		defer cancel()
		select {
		case <-ctx.Done():
		case <-run.Done():
			return
		}
		start := time.Now()
		bctx, bcancel := context.WithTimeout(stopping, wait)
		queued, taken := d.bookmarkAll(bctx)
		bcancel()
		// A server with no watch open says nothing of it (a Ctrl-C says one
		// line).
		log := klog.V(0)
		if queued == 0 {
			log = klog.V(2)
		}
		log.InfoS("Shutting down: bookmarked the caches' watches at their current resourceVersion",
			"queued", queued, "taken", taken, "took", time.Since(start), "wait", wait)
	}()
	return run, func() {
		stopNow()
		cancel()
		<-finished
	}
}
