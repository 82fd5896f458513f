package storagebench

import (
	"context"
	"fmt"
	"path"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/klog/v2"

	"github.com/watchkeeper/watchkeeper/internal/fixtures"
)

// setupWriters create a scenario's objects concurrently: the load is not
// measured, only its duration is reported.
const setupWriters = 32

// openRawStorage is the pods' etcd3 storage with no cache, built from the
// same config as the cache under test: the exactkey and storm scenarios
// create their objects through it before the cache starts, so the cache
// loads them with its first list.
func openRawStorage(env Env) (storage.Interface, func(), error) { return openRawStorageOf(env, pods) }

// openRawStorageOf is res's etcd3 storage with no cache.
func openRawStorageOf(env Env, res resource) (storage.Interface, func(), error) {
	s, destroy, err := generic.UndecoratedStorage(res.config(env), resourcePrefix, podKey, fixtures.PodReverseKeyFunc(resourcePrefix),
		res.newFunc, res.newListFunc, res.attrs, res.triggers(), res.indexers())
	if err != nil {
		return nil, nil, fmt.Errorf("raw etcd3 storage: %w", err)
	}
	return s, destroy, nil
}

// podWriter writes pods straight to etcd, one Put of the encoded object
// each, as the etcd3 storage stores them: the least a write can cost the
// writer, and nothing of the cache's (storm's writers; exactkey's writer
// process).
type podWriter struct {
	client *clientv3.Client
	// keyPrefix is what the etcd3 storage puts before a key under the
	// resource: the run's prefix, then "/".
	keyPrefix string
	// highest is the highest revision a put of this writer got (closeCompacted).
	highest atomic.Uint64
}

func newPodWriter(env Env) (*podWriter, error) {
	c, err := newEtcdClient(env)
	if err != nil {
		return nil, err
	}
	return &podWriter{client: c, keyPrefix: path.Join("/", env.Prefix) + "/"}, nil
}

// put stores pod, stamped with the write's time, over the object of its
// name (an update when it exists) and returns the resourceVersion etcd gave
// the write, once etcd answered.
func (w *podWriter) put(ctx context.Context, pod *example.Pod) (uint64, error) {
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[writtenAtAnnotation] = strconv.FormatInt(time.Now().UnixNano(), 10)
	rv, _, err := w.putObject(ctx, codec, pod)
	return rv, err
}

// putObject stores obj encoded with c over the object of its name, and
// returns the resourceVersion etcd gave the write and the bytes stored.
func (w *podWriter) putObject(ctx context.Context, c runtime.Codec, obj runtime.Object) (rv uint64, size int, err error) {
	data, err := runtime.Encode(c, obj)
	if err != nil {
		return 0, 0, err
	}
	key, err := w.etcdKey(obj)
	if err != nil {
		return 0, 0, err
	}
	resp, err := w.client.Put(ctx, key, string(data))
	if err != nil {
		return 0, 0, fmt.Errorf("writing %s: %w", key, err)
	}
	rv = uint64(resp.Header.Revision)
	for h := w.highest.Load(); rv > h && !w.highest.CompareAndSwap(h, rv); h = w.highest.Load() {
	}
	return rv, len(data), nil
}

// deleteObject deletes the object of obj's name, one Delete without the
// previous value, and returns the revision etcd gave the delete.
func (w *podWriter) deleteObject(ctx context.Context, obj runtime.Object) (uint64, error) {
	key, err := w.etcdKey(obj)
	if err != nil {
		return 0, err
	}
	resp, err := w.client.Delete(ctx, key)
	if err != nil {
		return 0, fmt.Errorf("deleting %s: %w", key, err)
	}
	return uint64(resp.Header.Revision), nil
}

// etcdKey is obj's key in etcd, as the etcd3 storage of the resource
// stores it.
func (w *podWriter) etcdKey(obj runtime.Object) (string, error) {
	key, err := podKey(obj)
	if err != nil {
		return "", err
	}
	return w.keyPrefix + strings.TrimPrefix(key, "/"), nil
}

func (w *podWriter) close() { _ = w.client.Close() }

// runWriters runs write in n goroutines and returns the first error.
func runWriters(n int, write func() error) error {
	errs := make(chan error, n)
	for range n {
		go func() { errs <- write() }()
	}
	var first error
	for range n {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// waitFor polls cond until it holds, and reports true; or false once
// progress has not moved for stall (a nil progress never moves: stall is
// then a plain deadline), or ctx ends.
func waitFor(ctx context.Context, progress *atomic.Int64, stall time.Duration, cond func() bool) bool {
	load := func() int64 { return 0 }
	if progress != nil {
		load = progress.Load
	}
	last, since := load(), time.Now()
	for !cond() {
		if ctx.Err() != nil {
			return false
		}
		if n := load(); n != last {
			last, since = n, time.Now()
		} else if time.Since(since) > stall {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// closeCompacted compacts etcd up to the writer's last put (nothing if it
// made none), once a run that wrote its objects twice is done with them,
// so the runs after it reuse the space under etcd's quota; a failure is
// logged, the run's figures stand. Then it closes the writer.
func (pw *podWriter) closeCompacted(run string) {
	if rv := pw.highest.Load(); rv != 0 {
		if _, err := pw.client.Compact(context.Background(), int64(rv)); err != nil {
			klog.InfoS("Compacting etcd after the run failed", "run", run, "rv", rv, "err", err)
		}
	}
	pw.close()
}
