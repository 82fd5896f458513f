package integration

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
)

// cwPayload stands for what hangs off a request's context (the request, its
// user, its audit event): what a closed watcher must not keep alive.
type cwPayload struct{ _ [4096]byte }

type cwPayloadKey struct{}

// cwRelease bounds how long the request's context may stay reachable after
// its watcher closed. Far below the bookmark frequency (a minute): until its
// slot comes up, a closed watcher stays filed on the bookmark calendar.
const cwRelease = 20 * time.Second

// TestClosedWatcherLetsGoOfItsRequest: at upstream's schedule (bookmarks every
// minute), a watcher that closes, whichever way, releases its request's
// context at once, although it stays filed on the bookmark calendar until
// its slot a minute later. Before, 1,200 dropped watches held ~20MiB for a
// minute (commit "a closed watcher lets go of its request").
func TestClosedWatcherLetsGoOfItsRequest(t *testing.T) {
	e := setup(t) // BookmarkFrequency: a minute
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// More objects than the result channel holds: a watch from RV 0 that
	// reads nothing keeps a pump waiting with initial events, and with them
	// the request's context (to signal when they have all gone out).
	for i := range 25 {
		bhCreatePod(ctx, t, e, "ns", fmt.Sprintf("p-%d", i))
	}
	current := fmt.Sprint(bhCurrentRV(ctx, t, e))

	for _, tc := range []struct {
		name string
		rv   string
		end  func(t *testing.T, w watch.Interface, cancelRequest context.CancelFunc)
	}{{
		// The client stops the watch while the request goes on (the request's
		// context is not cancelled): both the cancellation hook and the
		// initial-events context must be let go.
		name: "stopped with initial events unread",
		rv:   "0",
		end:  func(t *testing.T, w watch.Interface, _ context.CancelFunc) { w.Stop() },
	}, {
		// The client goes away: the request's context ends the watch.
		name: "request context cancelled",
		rv:   current,
		end: func(t *testing.T, w watch.Interface, cancelRequest context.CancelFunc) {
			cancelRequest()
			bhWaitClosed(t, w, 10*time.Second)
		},
	}, {
		name: "request context cancelled with initial events unread",
		rv:   "0",
		end: func(t *testing.T, w watch.Interface, cancelRequest context.CancelFunc) {
			cancelRequest()
			bhWaitClosed(t, w, 10*time.Second)
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			released := make(chan struct{})
			// The request's cancel function stays with the test until the
			// end, as the HTTP server keeps its own while the handler runs.
			cancelRequest := cwOpenAndEnd(t, e, tc.rv, released, tc.end)
			defer cancelRequest()
			start := time.Now()
			err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, cwRelease, true, func(context.Context) (bool, error) {
				runtime.GC()
				select {
				case <-released:
					return true, nil
				default:
					return false, nil
				}
			})
			if err != nil {
				t.Fatalf("the closed watcher's request context is still reachable %v after it closed (its bookmark is a minute away): %v", cwRelease, err)
			}
			t.Logf("request context released %v after the watcher closed", time.Since(start).Round(time.Millisecond))
		})
	}
}

// cwOpenAndEnd opens a watch (bookmarks on, so it is filed on the calendar)
// on a request context that carries a payload whose release closes released,
// ends it with end, and keeps no reference to the watcher or the context.
//
//go:noinline
func cwOpenAndEnd(t *testing.T, e *env, rv string, released chan struct{}, end func(*testing.T, watch.Interface, context.CancelFunc)) context.CancelFunc {
	t.Helper()
	base, cancelRequest := context.WithCancel(context.Background())
	payload := &cwPayload{}
	runtime.AddCleanup(payload, func(ch chan struct{}) { close(ch) }, released)
	ctx := context.WithValue(base, cwPayloadKey{}, payload)
	w, err := e.cacher.Watch(ctx, "/pods/", storage.ListOptions{ResourceVersion: rv, Recursive: true, Predicate: bhEverything(true)})
	if err != nil {
		cancelRequest()
		t.Fatal(err)
	}
	end(t, w, cancelRequest)
	return cancelRequest
}
