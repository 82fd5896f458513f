package cacher

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"
	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
)

// A list of everything is made as long as the hint says and fitted to what
// the walk found: a past state may hold fewer or more objects than the
// checkpoint the hint was read from.
func TestCopyAllFitsItsHint(t *testing.T) {
	var objs []*objects.Object
	for i := range 5 {
		objs = append(objs, objects.NewDecoded(fmt.Sprintf("/pods/ns/p%d", i), cachertest.NewPod(fmt.Sprintf("p%d", i), 10, nil, ""), nil, nil))
	}
	for _, hint := range []int{1, 4, 5, 6, 50} {
		list := &example.PodList{}
		p := copyAll(reflect.ValueOf(&list.Items).Elem(), slices.Values(objs), hint)
		var names []string
		for _, pod := range list.Items {
			names = append(names, pod.Name)
		}
		if want := []string{"p0", "p1", "p2", "p3", "p4"}; !slices.Equal(names, want) {
			t.Errorf("hint %d: listed %v, want %v", hint, names, want)
		}
		if p.fetched != 5 || p.total != 5 || p.lastKey != "/pods/ns/p4" || p.hasMore {
			t.Errorf("hint %d: page %+v, want 5 fetched, 5 in all, last /pods/ns/p4, no more", hint, p)
		}
	}
}

// A Get or a watch at a malformed resourceVersion gets exactly the
// storage's error (a storage.InvalidError on the resourceVersion field), not
// an error of the cache's making; past 64 bytes, garbage gets a 400 that
// quotes only a prefix of it (parseRV).
func TestMalformedRVIsTheStoragesError(t *testing.T) {
	c := newTestCacher(t, cachertest.NewFakeStorage(100, cachertest.NewPod("a", 100, nil, "")), nil)
	c.waitReady(t)
	sendInitial := true
	requests := map[string]func(rv string) error{
		"get": func(rv string) error {
			return c.Get(context.Background(), "/pods/"+cachertest.Namespace+"/a", storage.GetOptions{ResourceVersion: rv}, &example.Pod{})
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
	opts.Predicate, opts.Recursive = cachertest.Everything(true), true
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
	c := newTestCacher(t, cachertest.NewFakeStorage(100, cachertest.NewPod("a", 100, map[string]string{"app": "web"}, "n1")), nil)
	c.waitReady(t)
	selective := cachertest.Everything(false)
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
		ResourceVersion: "100", Predicate: cachertest.Everything(false), Recursive: true, WatchWithoutPrevKV: true,
	})
	if err != nil {
		t.Fatalf("watch without previous values, empty predicate: %v", err)
	}
	w.Stop()
}

type errorString string

func (e errorString) Error() string { return string(e) }

// FuzzParseRV feeds arbitrary strings to parseRV, which reads a malformed
// resourceVersion of a watch or get past 64 bytes (parseRequestRV; shorter
// ones get the storage's own error). It must never panic; what
// storage.APIObjectVersioner refuses is a 400 Bad Request (never a 500) that
// quotes the bad value, or, past 64 bytes, only its first 64 bytes and
// "...", so a client's megabyte of garbage reaches neither the response nor
// the logs; what it accepts is a decimal uint64 (or "" for none) that
// parseRV returns unchanged and that round-trips through strconv.FormatUint.
func FuzzParseRV(f *testing.F) {
	for _, rv := range []string{
		"", "0", "1", "00", "007", "42",
		"18446744073709551615", // max uint64
		"18446744073709551616", // max uint64 + 1
		"99999999999999999999999999999999",
		"-1", "+1", "-0", "+0", " 1", "1 ", "1\n", "\x00",
		"1e3", "0x10", "0b1", "0o7", "1_000", "1.0", "1,000",
		"abc", "null", "\"5\"", "１２", "٣", // fullwidth and Arabic-Indic digits
		"\xff\xfe", "9223372036854775807", "9223372036854775808",
		strings.Repeat("x", 64), strings.Repeat("x", 65), strings.Repeat("9", 4096), // at, just past and far past the quoting bound
		strings.Repeat("9", 63) + "é",                            // a rune cut in two by the bound
		strings.Repeat("1", 64) + "\"" + strings.Repeat("2", 10), // a quote just past the bound
		strings.Repeat("x", 64) + "...",                          // cut, it reads as it was
	} {
		f.Add(rv)
	}
	versioner := storage.APIObjectVersioner{}

	f.Fuzz(func(t *testing.T, rv string) {
		want, refused := versioner.ParseResourceVersion(rv)
		got, err := parseRV(versioner, rv)

		// An independent reading: no resourceVersion, or a decimal uint64.
		_, uintErr := strconv.ParseUint(rv, 10, 64)
		if valid := rv == "" || uintErr == nil; valid != (refused == nil) {
			t.Fatalf("APIObjectVersioner on %q: %v; strconv.ParseUint: %v", rv, refused, uintErr)
		}

		if refused != nil {
			if err == nil {
				t.Fatalf("parseRV(%q) = %d, nil; the versioner refuses it: %v", rv, got, refused)
			}
			if !apierrors.IsBadRequest(err) {
				t.Fatalf("parseRV(%q) error %v (%T, reason %q), want a 400 Bad Request", rv, err, err, apierrors.ReasonForError(err))
			}
			if code := apiStatusCode(err); code != http.StatusBadRequest {
				t.Fatalf("parseRV(%q): status code %d, want %d", rv, code, http.StatusBadRequest)
			}
			if got != 0 {
				t.Fatalf("parseRV(%q) = %d with an error, want 0", rv, got)
			}
			// The value is quoted, cut to its first 64 bytes and "..." when
			// longer: never whole past 64 bytes, never cut before.
			shown := rv
			if len(rv) > 64 {
				shown = rv[:64] + "..."
			}
			msg := err.Error()
			if !strings.Contains(msg, strconv.Quote(shown)) {
				t.Fatalf("parseRV(%.80q...) error %.200q does not quote %s", rv, msg, strconv.Quote(shown))
			}
			if shown != rv && strings.Contains(msg, strconv.Quote(rv)) {
				t.Fatalf("parseRV(%.80q...) error quotes all %d bytes", rv, len(rv))
			}
			if limit := len(strconv.Quote(shown)) + 100; len(msg) > limit {
				t.Fatalf("parseRV(%.80q...) error is %d bytes, want at most %d", rv, len(msg), limit)
			}
			return
		}

		if err != nil {
			t.Fatalf("parseRV(%q): %v; the versioner accepts it as %d", rv, err, want)
		}
		if got != want {
			t.Fatalf("parseRV(%q) = %d, the versioner reads %d", rv, got, want)
		}
		canonical := strconv.FormatUint(got, 10)
		again, err := parseRV(versioner, canonical)
		if err != nil || again != got {
			t.Fatalf("parseRV(%q) = %d, but parseRV(%q) = %d, %v", rv, got, canonical, again, err)
		}
		if rv != "" && canonical != rv {
			// Only leading zeros may differ: "007" is 7.
			if n, err := strconv.ParseUint(rv, 10, 64); err != nil || n != got || rv[0] != '0' {
				t.Fatalf("parseRV(%q) = %d, which formats as %q", rv, got, canonical)
			}
		}
	})
}

func apiStatusCode(err error) int32 {
	var s apierrors.APIStatus
	if errors.As(err, &s) {
		return s.Status().Code
	}
	return 0
}

// BenchmarkListFromCache lists 10,000 cached pods at RV "0", as the bench's
// list scenario does through the storage interface.
func BenchmarkListFromCache(b *testing.B) {
	var pods []*example.Pod
	for i := range 10_000 {
		pods = append(pods, cachertest.NewPod(fmt.Sprintf("pod-%05d", i), uint64(10+i), map[string]string{"app": "web"}, "node1"))
	}
	fs := cachertest.NewFakeStorage(20_000, pods...)
	c := newTestCacher(b, fs, nil)
	if err := c.WaitReady(context.Background()); err != nil {
		b.Fatal(err)
	}
	opts := storage.ListOptions{ResourceVersion: "0", Recursive: true, Predicate: cachertest.Everything(false)}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		list := &example.PodList{}
		if err := c.GetList(context.Background(), "/pods/", opts, list); err != nil {
			b.Fatal(err)
		}
		if len(list.Items) != 10_000 {
			b.Fatalf("listed %d", len(list.Items))
		}
	}
}

// BenchmarkListAfterWrites lists 10,000 objects at RV "0" from a cache that
// got them by 10,000 watch events, with and without ListFromCacheSnapshot:
// the list walks the same tree either way; what differs is the heap the
// clones kept per write add for the collector.
func BenchmarkListAfterWrites(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("snapshots=%v", on), func(b *testing.B) {
			featuregatetesting.SetFeatureGateDuringTest(b, utilfeature.DefaultFeatureGate, features.ListFromCacheSnapshot, on)
			fs := cachertest.NewFakeStorage(100)
			c := newTestCacher(b, fs, nil)
			c.WaitReady(context.Background())
			sw, _ := fs.WaitWatch(b, 1)
			for i := range 10_000 {
				sw.Send(b, watch.Added, cachertest.NewPod(fmt.Sprintf("pod-%05d", i), uint64(101+i), map[string]string{"app": "web"}, "node1"))
			}
			cachertest.Poll(b, "applied", func() bool { return c.state.CurrentRV() >= 10_100 })
			opts := storage.ListOptions{ResourceVersion: "0", Recursive: true, Predicate: cachertest.Everything(false)}
			b.ResetTimer()
			for b.Loop() {
				list := &example.PodList{}
				if err := c.GetList(context.Background(), "/pods/", opts, list); err != nil || len(list.Items) != 10_000 {
					b.Fatal(err, len(list.Items))
				}
			}
		})
	}
}

// BenchmarkListPastRV lists 10,000 objects written by events at an RV 30
// creates back, the bench's exact-RV list, whole and in pages of 500
// (kubectl's) followed to the end: the lists the snapshots serve; and, to
// compare, the current state at RV "0".
func BenchmarkListPastRV(b *testing.B) {
	featuregatetesting.SetFeatureGateDuringTest(b, utilfeature.DefaultFeatureGate, features.ListFromCacheSnapshot, true)
	fs := cachertest.NewFakeStorage(100)
	c := newTestCacher(b, fs, nil)
	c.WaitReady(context.Background())
	sw, _ := fs.WaitWatch(b, 1)
	const n, later = 10_000, 30
	for i := range n + later {
		sw.Send(b, watch.Added, cachertest.NewPod(fmt.Sprintf("pod-%05d", i), uint64(101+i), map[string]string{"app": "web"}, "node1"))
	}
	cachertest.Poll(b, "applied", func() bool { return c.state.CurrentRV() >= 100+n+later })
	rv := fmt.Sprint(100 + n)
	b.Run("rv0", func(b *testing.B) {
		opts := storage.ListOptions{ResourceVersion: "0", Recursive: true, Predicate: cachertest.Everything(false)}
		b.ReportAllocs()
		for b.Loop() {
			list := &example.PodList{}
			if err := c.GetList(context.Background(), "/pods/", opts, list); err != nil || len(list.Items) != n+later {
				b.Fatal(err, len(list.Items))
			}
		}
	})
	b.Run("exact", func(b *testing.B) {
		opts := storage.ListOptions{ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchExact, Recursive: true, Predicate: cachertest.Everything(false)}
		b.ReportAllocs()
		for b.Loop() {
			list := &example.PodList{}
			if err := c.GetList(context.Background(), "/pods/", opts, list); err != nil || len(list.Items) != n {
				b.Fatal(err, len(list.Items))
			}
		}
	})
	b.Run("pages", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			got, token := 0, ""
			for first := true; first || token != ""; first = false {
				pred := cachertest.Everything(false)
				pred.Limit, pred.Continue = 500, token
				opts := storage.ListOptions{Recursive: true, Predicate: pred}
				if first {
					opts.ResourceVersion, opts.ResourceVersionMatch = rv, metav1.ResourceVersionMatchExact
				}
				list := &example.PodList{}
				if err := c.GetList(context.Background(), "/pods/", opts, list); err != nil {
					b.Fatal(err)
				}
				got, token = got+len(list.Items), list.Continue
			}
			if got != n {
				b.Fatalf("listed %d", got)
			}
		}
	})
}
