package cacher

import (
	"context"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/utils/ptr"
)

// blockingSelector matches everything, but its first Matches waits until
// released: it holds a watch's initial state half built.
type blockingSelector struct {
	labels.Selector
	entered, release chan struct{}
	once             sync.Once
}

func (s *blockingSelector) Empty() bool { return false }
func (s *blockingSelector) Matches(labels.Labels) bool {
	s.once.Do(func() {
		close(s.entered)
		<-s.release
	})
	return true
}

// A WatchList builds its initial state outside the cache's exclusive lock:
// while it is half built the reflector goes on applying events, and the
// watch misses none of them (they follow the state, before the end
// bookmark).
func TestWatchListInitialStateDoesNotBlockTheReflector(t *testing.T) {
	fs := newFakeStorage(100, newTestPod("a", 90, nil, ""), newTestPod("b", 100, nil, ""))
	c := newTestCacher(t, fs, nil)
	c.waitReady(t)
	sw, _ := fs.waitWatch(t, 1)
	sel := &blockingSelector{Selector: labels.Everything(), entered: make(chan struct{}), release: make(chan struct{})}
	release := sync.OnceFunc(func() { close(sel.release) })
	t.Cleanup(release) // before the cacher's Stop: a failed wait must not leave the watch blocked
	pred := everything(true)
	pred.Label = sel
	done := make(chan watch.Interface, 1)
	go func() {
		w, err := c.Watch(context.Background(), "/pods/", storage.ListOptions{
			ResourceVersion: "0", SendInitialEvents: ptr.To(true), Recursive: true, Predicate: pred,
		})
		if err != nil {
			t.Errorf("Watch: %v", err)
		}
		done <- w
	}()
	<-sel.entered
	// The state is being built: the reflector applies a change meanwhile.
	sw.send(t, watch.Modified, newTestPod("a", 101, map[string]string{"v": "1"}, ""))
	// Wait aside: with the old code the wait itself blocks on the lock the
	// half-built watch holds.
	applied := make(chan struct{})
	go func() {
		for c.currentRV() < 101 {
			time.Sleep(time.Millisecond)
		}
		close(applied)
	}()
	select {
	case <-applied:
	case <-time.After(waitFor):
		release()
		<-applied
		t.Fatalf("the reflector could not apply an event while a WatchList's initial state was being built")
	}
	release()
	w := <-done
	if w == nil {
		return
	}
	defer w.Stop()
	var got []string
	for {
		ev := nextEvent(t, w)
		got = append(got, describe(ev))
		if ev.Type == watch.Bookmark {
			if rv := eventRV(t, ev); rv != 101 {
				t.Errorf("end bookmark at %d, want 101", rv)
			}
			break
		}
	}
	// The state at 100 (a@90, b@100), the change after it, then the end.
	if len(got) != 4 || got[0][:5] != "ADDED" || got[1][:5] != "ADDED" || got[2][:8] != "MODIFIED" {
		t.Errorf("stream %v, want ADDED a, ADDED b, MODIFIED a@101, BOOKMARK@101", got)
	}
}
