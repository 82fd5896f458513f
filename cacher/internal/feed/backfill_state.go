package feed

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/watch"

	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
)

// backfillKeyReads bounds the reads of single keys in flight, of every
// backfill of the process together: they all go to the one etcd. Each is
// a round trip that mostly waits, and at a restart the wait is the busy
// apiserver's own, not etcd's (etcd answers each read at a revision at
// once): more of them in flight wait side by side, where a few at a time
// read only a part of the keys in the time a backfill has. But 60
// resources resuming at once, each with 128 in flight, sent etcd 5,700
// reads together and every other read waited behind them (a GET up to
// 159 ms where an etcd watch from the same RV alone held it 42 ms;
// hack/bench restart): one backfill keeps what it had, many share it.
const backfillKeyReads = 128

// keyReadSlots holds a token for each key read in flight (backfillKeyReads).
var keyReadSlots = make(chan struct{}, backfillKeyReads)

// pastStateReader reads etcd's state at rv of the objects a backfill's
// events modify first, while the events are still arriving: an object
// whose first event is ADDED did not exist at rv, and a DELETED carries
// the object it removed, so only a first MODIFIED needs a read. Those keys
// are read one by one, backfillKeyReads at a time, unless they come to
// more than half of the objects the cache holds: then one read of the
// whole resource, after the events, costs less.
//
// A backfill runs when clients resume at an apiserver's restart, when etcd
// answers slowly: a read of the whole resource then took 7.9-14.9s for
// 3,000 pods at 300 nodes, and ran past backfillTimeout at 1,000 nodes,
// for the few hundred objects a few seconds of events change. The reads
// overlap the events' read, which one after the other would add to it.
//
// mu is a leaf: held for bookkeeping only, never across a read.
type pastStateReader struct {
	f      *Feed
	rv     uint64
	parent context.Context
	// ctx is the key reads': cancelled on the first failure, or once the
	// events' read failed.
	ctx    context.Context
	cancel context.CancelFunc
	// wholeAbove: more keys than this and the whole resource is read.
	wholeAbove int
	wg         sync.WaitGroup

	mu      sync.Mutex
	seen    map[string]bool
	pending []string
	workers int
	state   map[string]*objects.Object
	read    stateRead
	err     error
}

// stateRead says how a backfill read etcd's state: of how many objects,
// one by one or with the whole resource.
type stateRead struct {
	objects, read int
	whole         bool
}

func (r stateRead) String() string {
	if r.whole {
		return fmt.Sprintf("the whole resource, for %d objects", r.objects)
	}
	return fmt.Sprintf("%d of %d objects read one by one", r.read, r.objects)
}

func (f *Feed) newPastStateReader(ctx context.Context, rv uint64) *pastStateReader {
	keysCtx, cancel := context.WithCancel(ctx)
	return &pastStateReader{
		f: f, rv: rv, parent: ctx, ctx: keysCtx, cancel: cancel,
		wholeAbove: f.state.ObjectCount() / 2,
		seen:       map[string]bool{}, state: map[string]*objects.Object{},
	}
}

// add takes the backfill's events in order, as eventsBetween reads them.
func (r *pastStateReader) add(e *objects.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen[e.Cur.Key] {
		return
	}
	r.seen[e.Cur.Key] = true
	if e.Type != watch.Modified {
		return
	}
	r.read.objects++
	if r.read.whole || r.err != nil {
		return
	}
	if r.read.objects > r.wholeAbove {
		// No more key reads; those in flight finish (result waits for
		// them): a cancelled call is a WARN line in etcd's client, about
		// 100 of them per restart at 300 nodes.
		r.read.whole = true
		r.pending = nil
		return
	}
	r.pending = append(r.pending, e.Cur.Key)
	if r.workers < backfillKeyReads {
		r.workers++
		r.wg.Go(r.work)
	}
}

// work reads pending keys until none is left; add starts another worker
// for keys that come later.
func (r *pastStateReader) work() {
	for {
		r.mu.Lock()
		if len(r.pending) == 0 || r.read.whole || r.err != nil {
			r.workers--
			r.mu.Unlock()
			return
		}
		key := r.pending[0]
		r.pending = r.pending[1:]
		r.mu.Unlock()

		objs, err := r.readKey(key)
		r.mu.Lock()
		switch {
		case r.read.whole:
			// The whole resource is read instead: this key's state is
			// not needed.
		case err != nil:
			if r.err == nil {
				r.err = err
				r.cancel()
			}
		default:
			r.read.read++
			if len(objs) > 0 {
				r.state[key] = objs[0]
			}
		}
		r.mu.Unlock()
	}
}

// readKey reads key at the backfill's RV once a slot is free.
func (r *pastStateReader) readKey(key string) ([]*objects.Object, error) {
	select {
	case keyReadSlots <- struct{}{}:
	case <-r.ctx.Done():
		return nil, r.ctx.Err()
	}
	defer func() { <-keyReadSlots }()
	r.mu.Lock()
	moot := r.read.whole || r.err != nil
	r.mu.Unlock()
	if moot {
		// Switched to the whole resource, or failed, while it waited.
		return nil, nil
	}
	objs, _, err := r.f.listStorage(r.ctx, key, exactRead(r.rv, false), nil)
	return objs, err
}

// result waits for the key reads, once every event has been added, and is
// the state they read, by key; or, for many keys, reads the whole
// resource. eventsRead false (the events' read failed): it only stops the
// key reads.
func (r *pastStateReader) result(eventsRead bool) (map[string]*objects.Object, stateRead, error) {
	if !eventsRead {
		r.cancel()
	}
	r.wg.Wait()
	r.cancel()
	r.mu.Lock()
	read, err := r.read, r.err
	r.mu.Unlock()
	if !eventsRead || err != nil {
		return nil, read, err
	}
	if read.whole {
		state, err := r.f.stateAt(r.parent, r.rv)
		return state, read, err
	}
	return r.state, read, nil
}
