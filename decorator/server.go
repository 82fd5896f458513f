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
		return Track(genericregistry.StorageWithCacher()), nil
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

// EndWatchesOnShutdown makes a server's stop quick with open watches. Once
// ctx ends (the server is told to stop) and after another `after`, it ends
// every watch of d's watchkeeper caches, each after its client read what is
// queued (EndWatches), so clients resume from their last event or bookmark
// on another replica at once instead of when the HTTP server's shutdown
// timeout (60s) cuts them off; then, once a second, it ends the watches
// opened since (a client that re-watched before the server stopped
// listening). The caller calls the returned stop when the server has
// stopped; it waits for the goroutine to end.
func (d *Decorator) EndWatchesOnShutdown(ctx context.Context, after time.Duration) (stop func()) {
	return d.endWatchesOnShutdown(ctx, after, clock.RealClock{})
}

// endWatchesRepeat is how often watches opened after the first EndWatches
// of a shutdown are ended.
const endWatchesRepeat = time.Second

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
		n := d.EndWatches()
		klog.InfoS("Shutting down: ended the watch caches' watches", "watches", n, "after", after)
		tick := clk.NewTicker(endWatchesRepeat)
		defer tick.Stop()
		for {
			select {
			case <-tick.C():
				if n := d.EndWatches(); n > 0 {
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
