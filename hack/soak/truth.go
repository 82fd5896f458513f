package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/registry/widget"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/server"
)

// widgetsPrefix is where the sample apiserver keeps widgets in etcd:
// --etcd-prefix, then the resource prefix; a key ends in namespace/name.
const widgetsPrefix = "/registry/demo.watchkeeper.io/demo.watchkeeper.io/widgets/"

// keyTable interns namespace/name keys, so events are a few words each.
type keyTable struct {
	mu    sync.Mutex
	ids   map[string]int32
	names []string
}

func newKeyTable() *keyTable { return &keyTable{ids: map[string]int32{}} }

func (k *keyTable) id(key string) int32 {
	k.mu.Lock()
	defer k.mu.Unlock()
	if id, ok := k.ids[key]; ok {
		return id
	}
	id := int32(len(k.names))
	k.ids[key] = id
	k.names = append(k.names, key)
	return id
}

func (k *keyTable) name(id int32) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.names[id]
}

// attrs is what a selector looks at of one version of a widget, as the
// server's own GetAttrs computes it.
type attrs struct {
	ns     string
	rv     uint64
	labels labels.Set
	fields fields.Set
	// token is the linearizability client's operation that wrote this
	// version (opAnnotation), "" for the writers' widgets.
	token string
}

// truthEvent is one change to a widget as etcd recorded it.
type truthEvent struct {
	rev       uint64
	key       int32
	typ       watch.EventType // Added (created), Modified or Deleted
	cur, prev *attrs          // cur nil for a deletion, prev nil for a creation
	// at is when the checker's watch got it: etcd had committed it by then.
	at time.Time
}

// truth is the history of widgets, recorded live from an etcd watch of the
// checker's own. Recording live is what makes it compaction-safe: etcd's
// compaction deletes the history the checker needs, so the checker's watch
// starts before the first write and the soak never compacts past the
// revision the checker has seen (compactTarget). etcd restarts only pause
// the watch: it resumes from the revision after the last it got.
type truth struct {
	keys *keyTable

	mu     sync.Mutex
	events []truthEvent
	state  map[int32]*attrs
	err    error

	// seen is the revision up to which every widget event is recorded:
	// the last event's, or a progress notification's.
	seen atomic.Uint64

	watchMu  sync.Mutex
	watchCtx context.Context // the current watch's, for progress requests
}

func newTruth(keys *keyTable) *truth { return &truth{keys: keys, state: map[int32]*attrs{}} }

// run records every widget event from revision from on until ctx ends.
func (t *truth) run(ctx context.Context, client *clientv3.Client, from int64) {
	next := from
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		t.watchMu.Lock()
		t.watchCtx = wctx
		t.watchMu.Unlock()
		ch := client.Watch(wctx, widgetsPrefix, clientv3.WithPrefix(), clientv3.WithRev(next), clientv3.WithProgressNotify())
		for resp := range ch {
			if resp.CompactRevision > 0 {
				t.fail(fmt.Errorf("the checker's etcd watch was compacted at %d, before %d: history lost", resp.CompactRevision, next))
				cancel()
				return
			}
			if err := resp.Err(); err != nil {
				break // re-watch from next
			}
			for _, ev := range resp.Events {
				if err := t.apply(ev); err != nil {
					t.fail(err)
				}
				next = ev.Kv.ModRevision + 1
				t.seen.Store(uint64(ev.Kv.ModRevision))
			}
			if resp.IsProgressNotify() && uint64(resp.Header.Revision) > t.seen.Load() {
				t.seen.Store(uint64(resp.Header.Revision))
			}
		}
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (t *truth) fail(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		t.err = err
	}
}

func (t *truth) apply(ev *clientv3.Event) error {
	key := strings.TrimPrefix(string(ev.Kv.Key), widgetsPrefix)
	id := t.keys.id(key)
	rev := uint64(ev.Kv.ModRevision)
	te := truthEvent{rev: rev, key: id, at: time.Now()}
	t.mu.Lock()
	defer t.mu.Unlock()
	te.prev = t.state[id]
	switch ev.Type {
	case clientv3.EventTypeDelete:
		if te.prev == nil {
			return fmt.Errorf("etcd deleted %s at %d, which the checker never saw created", key, rev)
		}
		te.typ = watch.Deleted
		delete(t.state, id)
	case clientv3.EventTypePut:
		a, err := decodeAttrs(ev.Kv.Value)
		if err != nil {
			return fmt.Errorf("decoding %s at %d: %w", key, rev, err)
		}
		a.rv = rev
		te.cur = a
		te.typ = watch.Modified
		if ev.Kv.CreateRevision == ev.Kv.ModRevision {
			te.typ = watch.Added
		}
		t.state[id] = a
	}
	t.events = append(t.events, te)
	return nil
}

// decodeAttrs decodes a stored widget into the internal version and asks
// the widget registry for its labels and fields, as the server does.
func decodeAttrs(data []byte) (*attrs, error) {
	obj, _, err := server.Codecs.UniversalDecoder().Decode(data, nil, nil)
	if err != nil {
		return nil, err
	}
	w, ok := obj.(*demo.Widget)
	if !ok {
		return nil, fmt.Errorf("decoded a %T, not a widget", obj)
	}
	l, f, err := widget.GetAttrs(w)
	if err != nil {
		return nil, err
	}
	return &attrs{ns: w.Namespace, labels: l, fields: f, token: w.Annotations[opAnnotation]}, nil
}

// requestProgress asks etcd to confirm the checker's watch is current.
func (t *truth) requestProgress(client *clientv3.Client) {
	t.watchMu.Lock()
	ctx := t.watchCtx
	t.watchMu.Unlock()
	if ctx != nil {
		_ = client.RequestProgress(ctx)
	}
}

// waitCaughtUp waits until the checker has recorded everything up to etcd's
// current revision, and returns that revision.
func (t *truth) waitCaughtUp(ctx context.Context, client *clientv3.Client, timeout time.Duration) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := client.Get(ctx, widgetsPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	rev := uint64(resp.Header.Revision)
	for t.seen.Load() < rev {
		t.requestProgress(client)
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("the checker's etcd watch is at %d, etcd at %d: %w", t.seen.Load(), rev, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	return rev, t.failure()
}

func (t *truth) failure() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// snapshot returns the recorded history; call once recording has stopped.
func (t *truth) snapshot() []truthEvent {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.events
}
