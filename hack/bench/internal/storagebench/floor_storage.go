package storagebench

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/klog/v2"
)

// floorStorage is exactkey's decorator None: the least any cache that learns
// of writes from storage.Interface's Watch can do for exact-key watchers.
// One watch of the whole prefix on the raw etcd3 storage, and each event
// handed to the channels of the watches of its key, found in a map. No
// store, no history, no selectors, no bookmarks: its CPU per write, and per
// delivery, are what the exact-key targets cannot go below, measured with
// the same writes and the same clients as both caches.
//
// Every watch must start from the same RV (exactkey opens them all before
// its first write), since the one source watch starts from the first's.
// Reads go to etcd (the embedded raw storage).
type floorStorage struct {
	storage.Interface

	// mu guards the map and the source, and is held while an event is sent
	// so that Stop never closes a channel being sent on.
	mu      sync.Mutex
	byKey   map[string][]*floorWatch
	startRV string
	source  watch.Interface
	// done ends forwarding; forwarded is closed when it has.
	done      chan struct{}
	forwarded chan struct{}
	// held, when set (NoneHolding), takes every event before it is sent;
	// only the forwarding goroutine uses it.
	held *holding
}

// floorBuffer is each watch's channel buffer, the caches' own (both hand
// a client up to 10 events before they queue).
const floorBuffer = 10

func newFloorStorage(raw storage.Interface) *floorStorage {
	return &floorStorage{Interface: raw, byKey: map[string][]*floorWatch{},
		done: make(chan struct{}), forwarded: make(chan struct{})}
}

// Watch is a watch of one key (Recursive false) from the RV every watch of
// this storage starts from. It ends with Stop or destroy, not with its
// context: exactkey stops every watch it opens.
func (s *floorStorage) Watch(_ context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	if opts.Recursive {
		return nil, apierrors.NewBadRequest("the floor storage serves exact-key watches only")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.source == nil {
		src, err := s.Interface.Watch(context.Background(), resourcePrefix,
			storage.ListOptions{ResourceVersion: opts.ResourceVersion, Recursive: true, Predicate: storage.Everything})
		if err != nil {
			return nil, err
		}
		s.source, s.startRV = src, opts.ResourceVersion
		go s.forward()
	} else if opts.ResourceVersion != s.startRV {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the floor storage's watches all start at RV %q, not %q", s.startRV, opts.ResourceVersion))
	}
	w := &floorWatch{s: s, key: key, ch: make(chan watch.Event, floorBuffer)}
	s.byKey[key] = append(s.byKey[key], w)
	return w, nil
}

// forward hands each event of the source to its key's watches, waiting for
// each client: nothing is dropped, and exactkey's clients always read. When
// the source ends or fails, or the storage is destroyed, it closes every
// watch still open.
func (s *floorStorage) forward() {
	defer close(s.forwarded)
	for ev := range s.source.ResultChan() {
		if ev.Type == watch.Bookmark {
			continue
		}
		if ev.Type == watch.Error {
			klog.InfoS("Floor storage's source watch failed; its watches end", "status", ev.Object)
			break
		}
		key, err := podKey(ev.Object)
		if err != nil {
			klog.InfoS("Floor storage could not key an event; its watches end", "err", err)
			break
		}
		if s.held != nil {
			s.held.apply(key, ev, time.Now())
		}
		if !s.send(key, ev) {
			break
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, ws := range s.byKey {
		for _, w := range ws {
			close(w.ch)
		}
		delete(s.byKey, key)
	}
}

// send hands ev to every watch of key; false once the storage is destroyed.
func (s *floorStorage) send(key string, ev watch.Event) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.byKey[key] {
		select {
		case w.ch <- ev:
		case <-s.done:
			return false
		}
	}
	return true
}

// destroy stops the source; forward then closes every watch still open.
func (s *floorStorage) destroy() {
	close(s.done)
	s.mu.Lock()
	src := s.source
	s.mu.Unlock()
	if src != nil {
		src.Stop()
		<-s.forwarded
	}
}

type floorWatch struct {
	s   *floorStorage
	key string
	ch  chan watch.Event
}

func (w *floorWatch) ResultChan() <-chan watch.Event { return w.ch }

// Stop closes the channel unless the storage already has.
func (w *floorWatch) Stop() {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	ws := w.s.byKey[w.key]
	for i, x := range ws {
		if x == w {
			w.s.byKey[w.key] = append(ws[:i], ws[i+1:]...)
			close(w.ch)
			return
		}
	}
}
