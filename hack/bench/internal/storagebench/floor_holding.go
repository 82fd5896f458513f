package storagebench

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"

	"github.com/watchkeeper/watchkeeper/options"
)

// holding is what any watch cache holds, and nothing more: every object of
// the resource, decoded, by key (to serve lists and gets), and the events of
// the history window with the object each replaced (to resume watches and
// to rebuild past states), kept while younger than the window as both
// caches keep theirs. No index, no order, no selector attributes, no
// snapshots, no readers: the floor's extra cost with it is what holding
// alone costs a write (the map's update and the collector's scans of a
// larger heap).
type holding struct {
	window  time.Duration
	objects map[string]runtime.Object
	// events is a queue, oldest first from head on.
	events []heldEvent
	head   int
}

type heldEvent struct {
	at        time.Time
	obj, prev runtime.Object
}

// holdEverything lists every object under the resource prefix from raw.
func holdEverything(ctx context.Context, raw storage.Interface) (*holding, error) {
	list := pods.newListFunc()
	if err := raw.GetList(ctx, resourcePrefix, storage.ListOptions{Recursive: true, Predicate: storage.Everything}, list); err != nil {
		return nil, fmt.Errorf("holding floor's list: %w", err)
	}
	h := &holding{window: options.NewWatchCacheOptions().EffectiveEventsHistoryWindow(), objects: map[string]runtime.Object{}}
	err := meta.EachListItem(list, func(obj runtime.Object) error {
		key, err := podKey(obj)
		if err == nil {
			h.objects[key] = obj
		}
		return err
	})
	return h, err
}

// apply holds ev, an event on key at now, and lets go of the events the
// window no longer covers.
func (h *holding) apply(key string, ev watch.Event, now time.Time) {
	prev := h.objects[key]
	if ev.Type == watch.Deleted {
		delete(h.objects, key)
	} else {
		h.objects[key] = ev.Object
	}
	h.events = append(h.events, heldEvent{at: now, obj: ev.Object, prev: prev})
	for h.head < len(h.events) && now.Sub(h.events[h.head].at) > h.window {
		h.events[h.head] = heldEvent{}
		h.head++
	}
	if h.head > len(h.events)/2 {
		n := copy(h.events, h.events[h.head:])
		clear(h.events[n:])
		h.events, h.head = h.events[:n], 0
	}
}
