package decorator

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/watchkeeper/watchkeeper/cacher"
	"github.com/watchkeeper/watchkeeper/options"
)

func TestChoose(t *testing.T) {
	wk, err := Choose(options.DecoratorWatchkeeper, nil)
	if err != nil || wk == nil {
		t.Fatalf("watchkeeper: %v, %v", wk, err)
	}
	up, err := Choose(options.DecoratorUpstream, nil)
	if err != nil || up == nil {
		t.Fatalf("upstream: %v, %v", up, err)
	}
	// (Which cache it is shows in the sample apiserver's integration test
	// of the flag: a closure's pointer is not its identity once inlined.)
	if samePointer(up.decorate, wk.decorate) {
		t.Error("upstream's choice decorates as watchkeeper's does")
	}
	if none, err := Choose(options.DecoratorNone, nil); err != nil || none != nil {
		t.Errorf("none: %v, %v; want no decorator", none, err)
	}
	if _, err := Choose("upstreem", nil); err == nil || !strings.Contains(err.Error(), "--watch-cache-decorator") {
		t.Errorf("a typo: %v, want an error naming the flag", err)
	}
	bad := options.NewWatchCacheOptions()
	bad.BookmarkFrequency = 0
	if _, err := Choose(options.DecoratorWatchkeeper, bad); err == nil {
		t.Error("watchkeeper with invalid options: no error")
	}
	if _, err := Choose(options.DecoratorUpstream, bad); err != nil {
		t.Errorf("upstream ignores watchkeeper's options, got %v", err)
	}
}

// samePointer is whether a and b are the same function (closures of one
// literal are).
func samePointer(a, b generic.StorageDecorator) bool {
	return reflect.ValueOf(a).Pointer() == reflect.ValueOf(b).Pointer()
}

// Install with no decorator (none) serves even the resources the server
// would cache straight from etcd; with one, it is the cached resources'.
func TestInstall(t *testing.T) {
	d, err := NewDecorator(nil)
	if err != nil {
		t.Fatal(err)
	}
	delegate := &fakeGetter{}
	opts, err := Install(delegate, nil).GetRESTOptions(schema.GroupResource{Resource: "pods"}, nil)
	if err != nil || !isUndecorated(opts.Decorator) {
		t.Errorf("none: decorator undecorated = %v, err %v", isUndecorated(opts.Decorator), err)
	}
	opts, err = Install(delegate, d).GetRESTOptions(schema.GroupResource{Resource: "pods"}, nil)
	if err != nil || !isOurs(opts.Decorator, d) {
		t.Errorf("watchkeeper: decorator ours = %v, err %v", isOurs(opts.Decorator, d), err)
	}
}

// A shutdown ends the caches' watches once the server is told to stop and
// `after` has passed, not before; then once a second those opened since;
// and nothing after stop.
func TestEndWatchesOnShutdown(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	c := newQuietCache(t, widgets)
	d := stub(map[string]storage.Interface{widgets.String(): c}, map[string]int{})
	decorate(t, d, widgets)
	waitReady(t, c)
	deadline := time.Now().Add(30 * time.Second)
	open := func() watch.Interface {
		t.Helper()
		w, err := c.Watch(context.Background(), "/widgets/", storage.ListOptions{ResourceVersion: "1", Predicate: storage.Everything, Recursive: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		return w
	}
	// watchers counts the cache's open watches: endWatches removes them
	// before it returns, so a count is exact where a closed channel is not.
	watchers := func() int {
		n := 0
		for _, k := range c.Inspect(context.Background()).Watchers {
			n += k
		}
		return n
	}
	closed := func(w watch.Interface, wait time.Duration) bool {
		t.Helper()
		select {
		case ev, ok := <-w.ResultChan():
			if ok {
				t.Fatalf("unexpected event %v", ev)
			}
			return true
		case <-time.After(wait):
			return false
		}
	}
	waiters := func(what string) {
		t.Helper()
		for !clk.HasWaiters() {
			if time.Now().After(deadline) {
				t.Fatalf("no timer for %s", what)
			}
			time.Sleep(time.Millisecond)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w1 := open()
	stop := d.endWatchesOnShutdown(ctx, 5*time.Second, clk)
	defer stop()
	clk.Step(time.Hour) // the server runs: nothing ends
	time.Sleep(100 * time.Millisecond)
	if watchers() != 1 {
		t.Fatal("a watch ended before the server was told to stop")
	}
	cancel()
	waiters("the grace period")
	clk.Step(5*time.Second - time.Millisecond)
	time.Sleep(100 * time.Millisecond) // time to act for a goroutine that would end it now
	if watchers() != 1 {
		t.Fatal("a watch ended before the grace period passed")
	}
	clk.Step(time.Millisecond)
	if !closed(w1, 10*time.Second) {
		t.Fatal("a watch still open after the grace period")
	}
	waiters("the repeat")
	w2 := open()
	clk.Step(endWatchesRepeat)
	if !closed(w2, 10*time.Second) {
		t.Fatal("a watch opened after the first ending is still open a second later")
	}
	stop()
	w3 := open()
	clk.Step(time.Hour)
	if watchers() != 1 || closed(w3, 0) {
		t.Fatal("a watch ended after stop")
	}
}

// The server's context ends only once it was told to stop and every watch
// that takes bookmarks was sent one its client read; a client that reads
// nothing holds it for `wait` at most.
func TestBookmarkBeforeShutdown(t *testing.T) {
	widgetsCache, gadgetsCache := newQuietCache(t, widgets), newQuietCache(t, gadgets)
	d := stub(map[string]storage.Interface{widgets.String(): widgetsCache, gadgets.String(): gadgetsCache}, map[string]int{})
	decorate(t, d, widgets)
	decorate(t, d, gadgets)
	open := func(c *cacher.Cacher, prefix string) watch.Interface {
		t.Helper()
		waitReady(t, c)
		pred := storage.Everything
		pred.AllowWatchBookmarks = true
		w, err := c.Watch(context.Background(), prefix, storage.ListOptions{ResourceVersion: "1", Predicate: pred, Recursive: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		return w
	}
	w1, w2 := open(widgetsCache, "/widgets/"), open(gadgetsCache, "/gadgets/")
	ended := func(ctx context.Context, wait time.Duration) bool {
		select {
		case <-ctx.Done():
			return true
		case <-time.After(wait):
			return false
		}
	}
	bookmark := func(w watch.Interface) {
		t.Helper()
		select {
		case ev := <-w.ResultChan():
			if ev.Type != watch.Bookmark {
				t.Fatalf("got %s, want a bookmark", ev.Type)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no bookmark within 10s of the stop")
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	run, stop := d.bookmarkBeforeShutdown(ctx, time.Hour)
	defer stop()
	if ended(run, 100*time.Millisecond) {
		t.Fatal("the server's context ended before it was told to stop")
	}
	cancel()
	bookmark(w1)
	if ended(run, 200*time.Millisecond) {
		t.Fatal("the server's context ended before every client read its bookmark")
	}
	bookmark(w2)
	if !ended(run, 10*time.Second) {
		t.Fatal("the server's context still open 10s after every client read its bookmark")
	}

	// A client that reads nothing holds the stop for the wait only.
	open(widgetsCache, "/widgets/")
	ctx, cancel = context.WithCancel(context.Background())
	run, stop = d.bookmarkBeforeShutdown(ctx, 300*time.Millisecond)
	defer stop()
	cancel()
	bookmark(w1)
	bookmark(w2)
	if !ended(run, 10*time.Second) {
		t.Fatal("the server's context still open 10s after the wait")
	}
}

// waitReady waits up to 30s for c to have synced.
func waitReady(t *testing.T, c *cacher.Cacher) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatalf("cache not ready: %v", err)
	}
}
