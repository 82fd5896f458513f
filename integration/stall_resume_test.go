package integration

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"

	"github.com/watchkeeper/watchkeeper/internal/testchild"
	"github.com/watchkeeper/watchkeeper/internal/watchorder"
	"github.com/watchkeeper/watchkeeper/internal/watchstream"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/v1alpha1"
)

// Stall and resume against a real etcd (cacher/stall.go; issue 50, item
// 1): a watch client that stops reading while thousands of writes go by
// reads every one of them, in order, none twice, once it reads again, and
// its watch stays open. Today's upstream cache, and watchkeeper before it,
// closed such a watch (a client that stopped reading for 30s while 6,000
// objects were written got 1,334 events, then lost the watch). With
// --watch-cache-stall-slow-watchers=false both tests fail: the watch is
// closed.
//
// STALL_RESUME_FOR=1m makes the storage-level test's client stop reading
// for that long while writes go on at 200/s (the one-minute
// version); unset, it stops for 3,000 writes made as fast as etcd takes
// them, some seconds.

// stallWrites makes writes writes to pods in namespace ns with writers
// goroutines, or, for a duration d > 0, writes at rate a second for d, and
// returns every write's RV, sorted. Each writer owns its pods: it creates
// them, then relabels them round robin.
func stallWrites(ctx context.Context, e *env, ns string, writes, writers int, d time.Duration, rate int) ([]uint64, error) {
	const podsPerWriter = 25
	var (
		mu   sync.Mutex
		rvs  []uint64
		errs []error
		wg   sync.WaitGroup
	)
	deadline := time.Now().Add(d)
	for wr := range writers {
		wg.Go(func() {
			var tick *time.Ticker
			if d > 0 {
				tick = time.NewTicker(time.Second * time.Duration(writers) / time.Duration(rate))
				defer tick.Stop()
			}
			var mine []uint64
			for j := 0; ; j++ {
				if d > 0 && time.Now().After(deadline) || d == 0 && j*writers+wr >= writes {
					break
				}
				name := fmt.Sprintf("w%d-%02d", wr, j%podsPerWriter)
				key := bhPodKey(ns, name)
				out := &example.Pod{}
				var err error
				if j < podsPerWriter {
					err = e.cacher.Create(ctx, key, &example.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, out, 0)
				} else {
					err = e.cacher.GuaranteedUpdate(ctx, key, out, false, nil,
						func(input runtime.Object, _ storage.ResponseMeta) (runtime.Object, *uint64, error) {
							p := input.(*example.Pod).DeepCopy()
							p.Labels = map[string]string{"gen": fmt.Sprint(j)}
							return p, nil, nil
						}, nil)
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("writer %d, write %d: %w", wr, j, err))
					mu.Unlock()
					return
				}
				rv, err := e.cacher.Versioner().ObjectResourceVersion(out)
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				mine = append(mine, rv)
				if tick != nil {
					select {
					case <-tick.C:
					case <-ctx.Done():
						return
					}
				}
			}
			mu.Lock()
			rvs = append(rvs, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(rvs)
	return rvs, errors.Join(errs...)
}

// stallReadAll reads w until it has the events at want (sorted RVs), each
// once and in order; bookmarks may come between them, never behind the
// last event nor ahead of one still to come (watchorder).
func stallReadAll(t *testing.T, w watch.Interface, want []uint64, within time.Duration) (bookmarks int) {
	t.Helper()
	limit := time.Now().Add(within)
	r := watchorder.New(0, want)
	for !r.Done() {
		ev := bhNext(t, w, time.Until(limit))
		var rv uint64
		if ev.Type != watch.Error {
			rv = bhRvOf(t, ev.Object)
		}
		if err := r.Take(ev.Type, rv); err != nil {
			t.Fatalf("got %s: %v", bhDescribe(t, ev.Event), err)
		}
	}
	return r.Bookmarks
}

// TestStallResumeClientStopsReadingUnderWrites: a storage-level watch,
// never read while 3,000 writes (three times its queue bound) go to etcd,
// stalls; read, it has every write, in order, and then the next one live.
// Nothing is terminated.
func TestStallResumeClientStopsReadingUnderWrites(t *testing.T) {
	t.Parallel() // in a process of its own: the metrics are the process's
	if !testchild.Isolate(t) {
		return
	}
	var stallFor time.Duration
	if v := os.Getenv("STALL_RESUME_FOR"); v != "" {
		var err error
		if stallFor, err = time.ParseDuration(v); err != nil {
			t.Fatalf("STALL_RESUME_FOR=%q: %v", v, err)
		}
	}
	e := setup(t) // the decorator's schedule: stalling on, a queue bound of 1,024
	ctx := context.Background()
	from := bhCurrentRV(ctx, t, e)
	w, err := e.cacher.Watch(ctx, "/pods/", storage.ListOptions{
		ResourceVersion: fmt.Sprint(from), Recursive: true, Predicate: bhEverything(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	pods := map[string]string{"resource": "pods"}
	stalled0, _ := metricValue(t, "watchkeeper_watch_cache_slow_watchers_total", withOutcome(pods, "stalled"))
	terminated0, _ := metricValue(t, "apiserver_terminated_watchers_total", pods)

	start := time.Now()
	rvs, err := stallWrites(ctx, e, "stall", 3000, 4, stallFor, 200)
	if err != nil {
		t.Fatal(err)
	}
	stalledFor := time.Since(start)
	stalled, _ := metricValue(t, "watchkeeper_watch_cache_slow_watchers_total", withOutcome(pods, "stalled"))

	// Read first, so that with stalling off the test fails on what a
	// client sees (the events lost, the watch closed), not on a counter.
	read := time.Now()
	bookmarks := stallReadAll(t, w, rvs, 2*time.Minute)
	if stalled-stalled0 < 1 {
		t.Fatalf("%d writes went by an unread watch and it did not stall (stalls %v): the test proves nothing", len(rvs), stalled-stalled0)
	}
	t.Logf("a watch not read for %v while %d writes went by: stalled, then read all %d in order (and %d bookmarks) in %v",
		stalledFor.Round(time.Millisecond), len(rvs), len(rvs), bookmarks, time.Since(read).Round(time.Millisecond))

	// Open, and live again.
	more, err := stallWrites(ctx, e, "stall-after", 1, 1, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	stallReadAll(t, w, more, 30*time.Second)
	resumed, _ := metricValue(t, "watchkeeper_watch_cache_slow_watchers_total", withOutcome(pods, "resumed"))
	terminated, _ := metricValue(t, "apiserver_terminated_watchers_total", pods)
	if terminated != terminated0 || resumed < 1 {
		t.Errorf("terminated watchers moved by %v (want 0), resumes %v (want at least 1)", terminated-terminated0, resumed)
	}
}

// withOutcome is labels and slow_watchers_total's outcome label.
func withOutcome(labels map[string]string, outcome string) map[string]string {
	out := map[string]string{"outcome": outcome}
	for lk, lv := range labels {
		out[lk] = lv
	}
	return out
}

// TestStallResumeSampleServerClientStopsReading: over HTTP, a watch client
// of the sample apiserver that stops reading (its socket's window clamped,
// and ballast in its initial events so that the server's handler blocks
// writing to it, as in TestHostileStalledClient) while 2,000 updates go by
// (its queue bound is 1,024) stalls, and reading at last gets its initial
// events, then every update in order, none twice, on the same stream.
func TestStallResumeSampleServerClientStopsReading(t *testing.T) {
	t.Parallel() // in a process of its own: the metrics are the process's
	if !testchild.Isolate(t) {
		return
	}
	const (
		objects   = 20
		writers   = 4
		updates   = 2000
		ballastKB = 200
		ns        = "stall"
		ballastNS = "stall-ballast"
	)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := startSampleServer(t) // stalling on: the default
	widgets := s.Client.DemoV1alpha1().Widgets(ns)
	objs := make([]*v1alpha1.Widget, objects)
	for i := range objs {
		var err error
		if objs[i], err = widgets.Create(ctx, ssWidget(ns, fmt.Sprintf("w-%02d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ballast := (2*hostileSendBufferMax() + ballastKB<<10 - 1) / (ballastKB << 10)
	pad := strings.Repeat("x", ballastKB<<10)
	for i := range ballast {
		w := ssWidget(ballastNS, fmt.Sprintf("ballast-%02d", i))
		w.Annotations = map[string]string{"stall.watchkeeper.io/pad": pad}
		if _, err := s.Client.DemoV1alpha1().Widgets(ballastNS).Create(ctx, w, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	widgetsLabels := map[string]string{"group": hostileGroup, "resource": "widgets"}
	stalled0, _ := metricValue(t, "watchkeeper_watch_cache_slow_watchers_total", withOutcome(widgetsLabels, "stalled"))
	terminated0, _ := metricValue(t, "apiserver_terminated_watchers_total", widgetsLabels)

	// A watch of every namespace from RV 0, not read.
	c, err := dialHostileRaw(ctx, s, hostileTLS(t, s), 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer c.raw.Close()
	if err := c.sendGet(s, hostileWatchPath("", "0", false)); err != nil {
		t.Fatal(err)
	}
	resp, err := c.readHeader()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("watch answered %s", resp.Status)
	}
	time.Sleep(time.Second) // the ballast fills the buffers

	// Writer wr updates the objects o with o%writers == wr.
	var (
		mu   sync.Mutex
		rvs  []uint64
		errs []error
		wg   sync.WaitGroup
	)
	start := time.Now()
	for wr := range writers {
		wg.Go(func() {
			for j := wr; j < updates; j += writers {
				o := wr + (j/writers)%(objects/writers)*writers
				w := objs[o].DeepCopy()
				// Every update changes the object: a no-op update keeps
				// its RV and sends no event.
				w.Annotations = map[string]string{"stall.watchkeeper.io/update": strconv.Itoa(j)}
				got, err := widgets.Update(ctx, w, metav1.UpdateOptions{})
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				objs[o] = got
				rv, err := strconv.ParseUint(got.ResourceVersion, 10, 64)
				if err != nil {
					errs = append(errs, fmt.Errorf("update %d: resourceVersion %q: %w", j, got.ResourceVersion, err))
					mu.Unlock()
					return
				}
				rvs = append(rvs, rv)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	slices.Sort(rvs)
	waitHostile(t, 30*time.Second, "the unread watch stalls", func() (bool, string) {
		n, _ := metricValue(t, "watchkeeper_watch_cache_slow_watchers_total", withOutcome(widgetsLabels, "stalled"))
		return n > stalled0, fmt.Sprintf("stalls %v", n-stalled0)
	})
	t.Logf("%d updates (RVs %d..%d) in %v while the client did not read; it stalled", len(rvs), rvs[0], rvs[len(rvs)-1], time.Since(start).Round(time.Millisecond))

	// Read at last: the initial events, then every update, in order.
	_ = c.raw.SetReadDeadline(time.Now().Add(2 * time.Minute))
	lines := watchstream.NewLines(bufio.NewReaderSize(resp.Body, 64<<10))
	added, next := 0, 0
	for next < len(rvs) {
		line, err := lines.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				t.Fatalf("the stream ended after %d ADDED and %d of %d updates: the watch was closed", added, next, len(rvs))
			}
			t.Fatalf("reading after %d ADDED and %d of %d updates: %v", added, next, len(rvs), err)
		}
		ev, ok := hostileParse(line)
		if !ok {
			t.Fatalf("got %.200q", line)
		}
		switch {
		case ev.typ == "ADDED" && next == 0:
			added++
		case ev.typ == "MODIFIED" && ev.rv == rvs[next]:
			next++
		default:
			t.Fatalf("after %d ADDED and %d of %d updates got %s @%d, want MODIFIED @%d", added, next, len(rvs), ev.typ, ev.rv, rvs[next])
		}
	}
	if added != objects+ballast {
		t.Errorf("%d initial events, want %d", added, objects+ballast)
	}
	terminated, _ := metricValue(t, "apiserver_terminated_watchers_total", widgetsLabels)
	if terminated != terminated0 {
		t.Errorf("terminated watchers moved by %v, want 0", terminated-terminated0)
	}
	t.Logf("read at last: %d ADDED, then all %d updates in order on the same stream", added, len(rvs))
}
