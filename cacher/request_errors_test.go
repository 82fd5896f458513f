package cacher

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"
)

// The errors a malformed request gets before the cache looks at its state:
// the etcd3 store's own, as upstream's cache answers them and Kubernetes'
// storage conformance suite (v0.38) pins them.

// A Get or a watch at a malformed resourceVersion gets exactly the
// storage's error (a storage.InvalidError on the resourceVersion field), not
// an error of the cache's making; past 64 bytes, garbage gets a 400 that
// quotes only a prefix of it (parseRV).
func TestMalformedRVIsTheStoragesError(t *testing.T) {
	c := newTestCacher(t, newFakeStorage(100, newTestPod("a", 100, nil, "")), nil)
	c.waitReady(t)
	sendInitial := true
	requests := map[string]func(rv string) error{
		"get": func(rv string) error {
			return c.Get(context.Background(), "/pods/"+testNamespace+"/a", storage.GetOptions{ResourceVersion: rv}, &example.Pod{})
		},
		"watch": func(rv string) error { return watchErr(c, storage.ListOptions{ResourceVersion: rv}) },
		"watchlist": func(rv string) error {
			return watchErr(c, storage.ListOptions{ResourceVersion: rv, SendInitialEvents: &sendInitial})
		},
	}
	for name, request := range requests {
		for _, rv := range []string{"abc", "-1", "1.0", "99999999999999999999", strings.Repeat("9", 64)} {
			_, want := storage.APIObjectVersioner{}.ParseResourceVersion(rv)
			if err := request(rv); !reflect.DeepEqual(err, want) {
				t.Errorf("%s at RV %.20q: %v (%T), want the storage's %v", name, rv, err, err, want)
			}
		}
		garbage := strings.Repeat("9", 65)
		if err := request(garbage); !apierrors.IsBadRequest(err) || len(err.Error()) > 200 {
			t.Errorf("%s at a 65-byte RV: %.300v, want a 400 of at most 200 bytes", name, err)
		}
	}
}

// watchErr is the error of a watch of every pod with opts, failing if the
// watch opened.
func watchErr(c *testCacher, opts storage.ListOptions) error {
	opts.Predicate, opts.Recursive = everything(true), true
	w, err := c.Watch(context.Background(), "/pods/", opts)
	if w != nil {
		w.Stop()
		return fmt.Errorf("the watch opened")
	}
	return err
}

// A watch without previous values cannot filter: its events of a deletion
// carry no object to match. The etcd3 watcher refuses a predicate with it,
// and so does the cache, with the same internal error, so that a caller
// learns of the mistake whichever storage it watches.
func TestWatchWithoutPrevKVNeedsAnEmptyPredicate(t *testing.T) {
	c := newTestCacher(t, newFakeStorage(100, newTestPod("a", 100, map[string]string{"app": "web"}, "n1")), nil)
	c.waitReady(t)
	selective := everything(false)
	selective.Label = labels.SelectorFromSet(labels.Set{"app": "web"})
	w, err := c.Watch(context.Background(), "/pods/", storage.ListOptions{
		ResourceVersion: "100", Predicate: selective, Recursive: true, WatchWithoutPrevKV: true,
	})
	if w != nil {
		w.Stop()
	}
	want := apierrors.NewInternalError(errorString("watchWithoutPrevKV requires an empty predicate"))
	if w != nil || !apierrors.IsInternalError(err) || err == nil || err.Error() != want.Error() {
		t.Fatalf("watch without previous values with a label selector: opened %v, error %v; want no watch and %v", w != nil, err, want)
	}

	// With an empty predicate the flag means nothing to the cache: the
	// watch opens.
	w, err = c.Watch(context.Background(), "/pods/", storage.ListOptions{
		ResourceVersion: "100", Predicate: everything(false), Recursive: true, WatchWithoutPrevKV: true,
	})
	if err != nil {
		t.Fatalf("watch without previous values, empty predicate: %v", err)
	}
	w.Stop()
}

type errorString string

func (e errorString) Error() string { return string(e) }
