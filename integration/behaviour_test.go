package integration

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/apis/example"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/utils/ptr"

	"github.com/watchkeeper/watchkeeper/cacher"
)

// watchkeeper's own behaviour on top of the storage.Interface contract: the
// bookmark schedule, the history window and the WatchList end bookmark, end
// to end over a real etcd. Timings are short real ones and every bound is
// generous: these tests assert what the schedule promises, they do not
// measure it (the t.Logf figures are for information only).
//
// Helpers here carry a bh prefix so they cannot clash with other files of
// this package.

// The schedule knobs the harness leaves at their defaults.
const (
	bhGranularity = time.Second // bookmarks.DefaultGranularity
	bhJitter      = 0.25        // the harness's BookmarkJitter
	// bhMaxTick is the longest interval between two ticks.
	bhMaxTick = time.Duration(float64(bhGranularity) * (1 + bhJitter))
)

// bhReceived is one watch event and when the test read it.
type bhReceived struct {
	watch.Event
	at time.Time
}

// bhCollect reads w for d, or until its channel closes, and reports which.
func bhCollect(w watch.Interface, d time.Duration) (out []bhReceived, closed bool) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return out, true
			}
			out = append(out, bhReceived{Event: plainEvent(ev), at: time.Now()})
		case <-timer.C:
			return out, false
		}
	}
}

// bhNext returns w's next event, failing the test when none comes within d or
// the channel closes.
func bhNext(t *testing.T, w watch.Interface, d time.Duration) bhReceived {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatalf("watch closed while waiting for an event")
		}
		return bhReceived{Event: plainEvent(ev), at: time.Now()}
	case <-timer.C:
		t.Fatalf("no event within %v", d)
	}
	return bhReceived{}
}

// bhWaitClosed drains w until its channel closes and returns when it did,
// failing the test when it is still open after d.
func bhWaitClosed(t *testing.T, w watch.Interface, d time.Duration) time.Time {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case _, ok := <-w.ResultChan():
			if !ok {
				return time.Now()
			}
		case <-timer.C:
			t.Fatalf("watch still open %v later", d)
			return time.Time{}
		}
	}
}

func bhRvOf(t *testing.T, obj runtime.Object) uint64 {
	t.Helper()
	rv, err := storage.APIObjectVersioner{}.ObjectResourceVersion(obj)
	if err != nil {
		t.Fatalf("resourceVersion of %T: %v", obj, err)
	}
	return rv
}

func bhDescribe(t *testing.T, ev watch.Event) string {
	t.Helper()
	if p, ok := ev.Object.(*example.Pod); ok {
		return fmt.Sprintf("%s %s/%s@%s", ev.Type, p.Namespace, p.Name, p.ResourceVersion)
	}
	return fmt.Sprintf("%s %T", ev.Type, ev.Object)
}

func bhEverything(bookmarks bool) storage.SelectionPredicate {
	p := storage.Everything
	p.AllowWatchBookmarks = bookmarks
	return p
}

func bhPodKey(ns, name string) string { return "/pods/" + ns + "/" + name }

func bhCreatePod(ctx context.Context, t *testing.T, e *env, ns, name string) *example.Pod {
	t.Helper()
	out := &example.Pod{}
	in := &example.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := e.cacher.Create(ctx, bhPodKey(ns, name), in, out, 0); err != nil {
		t.Fatalf("creating %s/%s: %v", ns, name, err)
	}
	return out
}

func bhRelabelPod(ctx context.Context, t *testing.T, e *env, ns, name, value string) *example.Pod {
	t.Helper()
	out := &example.Pod{}
	err := e.cacher.GuaranteedUpdate(ctx, bhPodKey(ns, name), out, false, nil,
		func(input runtime.Object, _ storage.ResponseMeta) (runtime.Object, *uint64, error) {
			p := input.(*example.Pod).DeepCopy()
			p.Labels = map[string]string{"gen": value}
			return p, nil, nil
		}, nil)
	if err != nil {
		t.Fatalf("updating %s/%s: %v", ns, name, err)
	}
	return out
}

// bhWaitCached blocks until the cache has applied rv (a Get at rv is served
// from the cache only once it has).
func bhWaitCached(ctx context.Context, t *testing.T, e *env, ns, name string, rv uint64) {
	t.Helper()
	got := &example.Pod{}
	opts := storage.GetOptions{ResourceVersion: strconv.FormatUint(rv, 10)}
	if err := e.cacher.Get(ctx, bhPodKey(ns, name), opts, got); err != nil {
		t.Fatalf("cache never reached RV %d: %v", rv, err)
	}
}

func bhCurrentRV(ctx context.Context, t *testing.T, e *env) uint64 {
	t.Helper()
	rv, err := e.cacher.GetCurrentResourceVersion(ctx)
	if err != nil {
		t.Fatalf("etcd's current revision: %v", err)
	}
	return rv
}

// bhBumpEtcd writes a key outside the resource: etcd's revision moves and the
// cache only learns of it through a progress notification.
func bhBumpEtcd(ctx context.Context, t *testing.T, e *env) uint64 {
	t.Helper()
	resp, err := e.client.Client.KV.Put(ctx, "/unrelated/key", "x")
	if err != nil {
		t.Fatalf("writing outside the resource: %v", err)
	}
	return uint64(resp.Header.Revision)
}

// bhSpacing returns the gaps between consecutive times and their min/avg/max.
func bhSpacing(times []time.Time) (gaps []time.Duration, lo, avg, hi time.Duration) {
	var sum time.Duration
	for i := 1; i < len(times); i++ {
		g := times[i].Sub(times[i-1])
		gaps = append(gaps, g)
		sum += g
		if i == 1 || g < lo {
			lo = g
		}
		if g > hi {
			hi = g
		}
	}
	if len(gaps) > 0 {
		avg = sum / time.Duration(len(gaps))
	}
	return gaps, lo, avg, hi
}

// bhCheckHeartbeats checks the bookmarks a watch read over observe against
// a heartbeat every frequency, each sent up to one slot early and one
// jittered tick late: by their count and their mean spacing, not gap by gap.
// The times are the client's reads: a bookmark read late (a busy machine)
// makes its gap longer and the next one shorter by as much, which moves
// neither the count nor the mean (only a late first or last read moves the
// mean, by the delay over the number of gaps). The gaps are logged.
func bhCheckHeartbeats(t *testing.T, start time.Time, at []time.Time, observe, frequency time.Duration) {
	t.Helper()
	if len(at) < 3 {
		t.Fatalf("got %d bookmarks in %v at frequency %v, want at least 3", len(at), observe, frequency)
	}
	gaps, lo, avg, hi := bhSpacing(at)
	t.Logf("frequency %v: %d bookmarks in %v, first after %v; spacing min %v avg %v max %v (gaps %v)",
		frequency, len(at), observe, at[0].Sub(start).Round(time.Millisecond),
		lo.Round(time.Millisecond), avg.Round(time.Millisecond), hi.Round(time.Millisecond), bhRoundAll(gaps))
	// Each bookmark is due a frequency after the last was sent, so being
	// early or late does not add up: the mean stays near the frequency. A
	// bookmark every slot, or a skipped heartbeat, moves it by half a slot
	// or more.
	lower, upper := frequency-bhGranularity/2, frequency+bhMaxTick/2+time.Second
	if avg <= lower || avg >= upper {
		t.Errorf("mean spacing of %d bookmarks is %v, want within (%v, %v)", len(at), avg, lower, upper)
	}
	// Sent no more often than a frequency less a slot apart, the first one
	// no sooner.
	if early := frequency - bhGranularity; early > 0 {
		if most := int(observe/early) + 1; len(at) > most {
			t.Errorf("%d bookmarks in %v, want at most %d at frequency %v", len(at), observe, most, frequency)
		}
	}
}

// TestBehaviourBookmarkFrequency: an idle watch hears a bookmark every
// frequency, give or take one slot on the early side and one jittered tick
// on the late side.
func TestBehaviourBookmarkFrequency(t *testing.T) {
	// Mostly waiting for the schedule, with an etcd and a cache of its own
	// and nothing process-wide read: runs beside the other such tests.
	t.Parallel()
	for _, tc := range []struct {
		frequency, observe time.Duration
	}{
		// 1s is the case the schedule note quotes; with a 1s slot its lower
		// bound is 0, so 2s checks that bookmarks are not sent early either.
		{frequency: time.Second, observe: 6 * time.Second},
		{frequency: 2 * time.Second, observe: 9 * time.Second},
	} {
		t.Run("frequency="+tc.frequency.String(), func(t *testing.T) {
			t.Parallel()
			e := setup(t, withSchedule(tc.frequency, 500*time.Millisecond, tc.frequency+15*time.Second))
			ctx := context.Background()
			rv := bhCurrentRV(ctx, t, e)
			start := time.Now()
			w, err := e.cacher.Watch(ctx, "/pods/", storage.ListOptions{
				ResourceVersion: strconv.FormatUint(rv, 10), Recursive: true, Predicate: bhEverything(true),
			})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			events, closed := bhCollect(w, tc.observe)
			if closed {
				t.Fatalf("watch closed after %d events", len(events))
			}
			var at []time.Time
			for _, ev := range events {
				if ev.Type != watch.Bookmark {
					t.Fatalf("nothing was written, got %s", bhDescribe(t, ev.Event))
				}
				at = append(at, ev.at)
			}
			bhCheckHeartbeats(t, start, at, tc.observe, tc.frequency)
		})
	}
}

func bhRoundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// TestBehaviourProofOfLifeOnIdleEtcd: with etcd's revision standing still,
// bookmarks keep coming, never below the last event the client saw, and the
// first one comes within one frequency and two slots of the watch start.
func TestBehaviourProofOfLifeOnIdleEtcd(t *testing.T) {
	// Mostly waiting for the schedule, with an etcd and a cache of its own
	// and nothing process-wide read: runs beside the other such tests.
	t.Parallel()
	const frequency = time.Second
	e := setup(t, withSchedule(frequency, 500*time.Millisecond, 16*time.Second))
	ctx := context.Background()
	from := bhCurrentRV(ctx, t, e)
	pod := bhCreatePod(ctx, t, e, "idle", "p")
	podRV := bhRvOf(t, pod)
	bhWaitCached(ctx, t, e, "idle", "p", podRV)
	idleRV := bhCurrentRV(ctx, t, e)

	start := time.Now()
	w, err := e.cacher.Watch(ctx, "/pods/", storage.ListOptions{
		ResourceVersion: strconv.FormatUint(from, 10), Recursive: true, Predicate: bhEverything(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	events, closed := bhCollect(w, 6*time.Second)
	if closed {
		t.Fatalf("watch closed after %d events", len(events))
	}
	endRV := bhCurrentRV(ctx, t, e)
	if endRV != idleRV {
		t.Fatalf("etcd was not idle: revision moved from %d to %d", idleRV, endRV)
	}

	var lastEventRV uint64
	var bookmarkAt []time.Time
	for _, ev := range events {
		rv := bhRvOf(t, ev.Object)
		switch ev.Type {
		case watch.Bookmark:
			if rv < lastEventRV {
				t.Errorf("bookmark at RV %d went back behind the last event at RV %d", rv, lastEventRV)
			}
			if rv > idleRV {
				t.Errorf("bookmark at RV %d is ahead of etcd's revision %d", rv, idleRV)
			}
			bookmarkAt = append(bookmarkAt, ev.at)
		case watch.Added:
			if len(bookmarkAt) > 0 || rv != podRV {
				t.Errorf("unexpected %s", bhDescribe(t, ev.Event))
			}
			lastEventRV = rv
		default:
			t.Errorf("unexpected %s", bhDescribe(t, ev.Event))
		}
	}
	if lastEventRV != podRV {
		t.Fatalf("the replayed creation at RV %d never came (events: %d)", podRV, len(events))
	}
	if len(bookmarkAt) < 3 {
		t.Fatalf("got %d bookmarks in 6s on an idle etcd, want at least 3", len(bookmarkAt))
	}
	first := bookmarkAt[0].Sub(start)
	_, lo, avg, hi := bhSpacing(bookmarkAt)
	t.Logf("idle etcd at RV %d: %d bookmarks, first after %v; spacing min %v avg %v max %v",
		idleRV, len(bookmarkAt), first.Round(time.Millisecond), lo.Round(time.Millisecond),
		avg.Round(time.Millisecond), hi.Round(time.Millisecond))
	if limit := frequency + 2*bhGranularity; first > limit {
		t.Errorf("first bookmark came %v after the watch started, want within %v", first, limit)
	}
}

// TestBehaviourPreDeadlineBookmark: a watch whose deadline comes long before
// its next heartbeat gets one bookmark about the offset before the deadline,
// then closes at the deadline.
func TestBehaviourPreDeadlineBookmark(t *testing.T) {
	const offset, slack = 2 * time.Second, 500 * time.Millisecond
	e := setup(t, withSchedule(time.Minute, offset, time.Minute+15*time.Second))
	rv := bhCurrentRV(context.Background(), t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	deadline, _ := ctx.Deadline()
	w, err := e.cacher.Watch(ctx, "/pods/", storage.ListOptions{
		ResourceVersion: strconv.FormatUint(rv, 10), Recursive: true, Predicate: bhEverything(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	events, closed := bhCollect(w, time.Until(deadline)+5*time.Second)
	if !closed {
		t.Errorf("watch still open 5s after its deadline")
	}
	if len(events) != 1 || events[0].Type != watch.Bookmark {
		for _, ev := range events {
			t.Logf("got %s at deadline%+v", bhDescribe(t, ev.Event), ev.at.Sub(deadline).Round(time.Millisecond))
		}
		t.Fatalf("got %d events, want exactly the pre-deadline bookmark", len(events))
	}
	lead := deadline.Sub(events[0].at)
	t.Logf("pre-deadline bookmark %v before the deadline (offset %v)", lead.Round(time.Millisecond), offset)
	if lead <= 0 {
		t.Fatalf("the bookmark came %v after the deadline", -lead)
	}
	lower, upper := offset-bhMaxTick-slack, offset+bhGranularity+slack
	if lead < lower || lead > upper {
		t.Errorf("bookmark lead %v, want within [%v, %v]", lead, lower, upper)
	}
}

// TestBehaviourHistoryWindow: within the window a watch resumes from an old
// RV with every later event, in order, once; past the window too while no
// write needed the room; once writes evicted what it needs, 410.
func TestBehaviourHistoryWindow(t *testing.T) {
	// Mostly waiting for the schedule, with an etcd and a cache of its own
	// and nothing process-wide read: runs beside the other such tests.
	t.Parallel()
	const window = 3 * time.Second
	e := setup(t, withSchedule(time.Second, 500*time.Millisecond, window))
	ctx := context.Background()
	rv1 := bhRvOf(t, bhCreatePod(ctx, t, e, "hist", "p"))
	var want []uint64
	for i := range 5 {
		want = append(want, bhRvOf(t, bhRelabelPod(ctx, t, e, "hist", "p", strconv.Itoa(i))))
	}

	w, err := e.cacher.Watch(ctx, bhPodKey("hist", "p"), storage.ListOptions{
		ResourceVersion: strconv.FormatUint(rv1, 10), Predicate: bhEverything(false),
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for range want {
		ev := bhNext(t, w, 5*time.Second)
		if ev.Type != watch.Modified {
			t.Fatalf("got %s, want MODIFIED", bhDescribe(t, ev.Event))
		}
		got = append(got, bhRvOf(t, ev.Object))
	}
	// Anything more would be a duplicate: the next event must be the next
	// write.
	fence := bhRvOf(t, bhRelabelPod(ctx, t, e, "hist", "p", "fence"))
	lastWrite := time.Now()
	if ev := bhNext(t, w, 5*time.Second); ev.Type != watch.Modified || bhRvOf(t, ev.Object) != fence {
		t.Errorf("after the %d events, got %s, want the next write, MODIFIED at %d", len(want), bhDescribe(t, ev.Event), fence)
	}
	w.Stop()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("watch from RV %d got RVs %v, want %v", rv1, got, want)
	}
	want = append(want, fence)

	// Past the window, plus two ticks: age alone evicts nothing (upstream
	// keeps its buffer until it needs the room), so the same resume works.
	time.Sleep(time.Until(lastWrite.Add(window + 2*bhMaxTick + 500*time.Millisecond)))
	w, err = e.cacher.Watch(ctx, bhPodKey("hist", "p"), storage.ListOptions{
		ResourceVersion: strconv.FormatUint(rv1, 10), Predicate: bhEverything(false),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, rv := range want {
		if ev := bhNext(t, w, 5*time.Second); ev.Type != watch.Modified || bhRvOf(t, ev.Object) != rv {
			t.Fatalf("past the window, no write since: got %s, want MODIFIED at %d", bhDescribe(t, ev.Event), rv)
		}
	}
	w.Stop()

	// Writes that need the room of the events past the window evict them:
	// the history keeps at least 100 events, so 100 more do.
	bhCreatePod(ctx, t, e, "hist", "q")
	var lastQ uint64
	for i := range 100 {
		lastQ = bhRvOf(t, bhRelabelPod(ctx, t, e, "hist", "q", strconv.Itoa(i)))
	}
	bhWaitCached(ctx, t, e, "hist", "q", lastQ)
	w, err = e.cacher.Watch(ctx, bhPodKey("hist", "p"), storage.ListOptions{
		ResourceVersion: strconv.FormatUint(rv1, 10), Predicate: bhEverything(false),
	})
	if err != nil {
		t.Fatalf("an expired RV must be reported in the stream, got %v", err)
	}
	ev := bhNext(t, w, 5*time.Second)
	if ev.Type != watch.Error {
		t.Fatalf("watch from RV %d past the window got %s, want an error", rv1, bhDescribe(t, ev.Event))
	}
	status, ok := ev.Object.(*metav1.Status)
	if !ok {
		t.Fatalf("error event carries %T, want *metav1.Status", ev.Object)
	}
	t.Logf("past the window: %d %s %q", status.Code, status.Reason, status.Message)
	if status.Code != http.StatusGone || status.Reason != metav1.StatusReasonExpired {
		t.Errorf("got code %d reason %q, want %d %q", status.Code, status.Reason, http.StatusGone, metav1.StatusReasonExpired)
	}
	if !apierrors.IsResourceExpired(apierrors.FromObject(status)) {
		t.Errorf("IsResourceExpired is false for %+v", status)
	}
	if !strings.Contains(status.Message, "too old resource version") {
		t.Errorf("message %q does not say \"too old resource version\"", status.Message)
	}
	bhWaitClosed(t, w, 5*time.Second)

	// The newest state is always resumable: evicting leaves no gap above it.
	newest := lastQ
	w, err = e.cacher.Watch(ctx, bhPodKey("hist", "p"), storage.ListOptions{
		ResourceVersion: strconv.FormatUint(newest, 10), Predicate: bhEverything(false),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// Nothing before the next write (an event from before the RV would
	// come first), and the watch stays open for it.
	rv := bhRvOf(t, bhRelabelPod(ctx, t, e, "hist", "p", "after"))
	if ev := bhNext(t, w, 5*time.Second); ev.Type != watch.Modified || bhRvOf(t, ev.Object) != rv {
		t.Errorf("watch from the newest RV %d got %s, want the next write, MODIFIED at %d", newest, bhDescribe(t, ev.Event), rv)
	}
}

// TestBehaviourWatchListEndBookmark: sendInitialEvents=true gets the state as
// ADDED, one annotated bookmark at or above the floor without waiting for a
// tick, then live events; later bookmarks are plain heartbeats.
func TestBehaviourWatchListEndBookmark(t *testing.T) {
	for _, mode := range []string{"unset", "zero", "exact"} {
		t.Run("rv="+mode, func(t *testing.T) {
			e := setup(t, withSchedule(time.Second, 500*time.Millisecond, 16*time.Second))
			ctx := context.Background()
			names := []string{"a", "b", "c"}
			var lastRV uint64
			for _, n := range names {
				lastRV = bhRvOf(t, bhCreatePod(ctx, t, e, "wl", n))
			}
			bhWaitCached(ctx, t, e, "wl", "c", lastRV)

			var requested string
			var floor uint64
			var err error
			switch mode {
			case "unset":
				// etcd moves ahead of the cache, which must catch up through a
				// progress notification before it may end the initial events.
				bhBumpEtcd(ctx, t, e)
				floor = bhCurrentRV(ctx, t, e)
			case "zero":
				requested = "0"
				list := &example.PodList{}
				if err := e.cacher.GetList(ctx, "/pods/", storage.ListOptions{ResourceVersion: "0", Recursive: true, Predicate: storage.Everything}, list); err != nil {
					t.Fatal(err)
				}
				if floor, err = strconv.ParseUint(list.ResourceVersion, 10, 64); err != nil {
					t.Fatalf("list RV %q: %v", list.ResourceVersion, err)
				}
			case "exact":
				floor = bhBumpEtcd(ctx, t, e)
				requested = strconv.FormatUint(floor, 10)
			}

			start := time.Now()
			w, err := e.cacher.Watch(ctx, "/pods/", storage.ListOptions{
				ResourceVersion: requested, Recursive: true, Predicate: bhEverything(true),
				SendInitialEvents: ptr.To(true),
			})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()

			added := map[string]uint64{}
			var end bhReceived
			for end.Object == nil {
				ev := bhNext(t, w, 5*time.Second)
				switch ev.Type {
				case watch.Added:
					p := ev.Object.(*example.Pod)
					if _, dup := added[p.Name]; dup {
						t.Errorf("initial object %s sent twice", p.Name)
					}
					added[p.Name] = bhRvOf(t, p)
				case watch.Bookmark:
					marked, err := storage.HasInitialEventsEndBookmarkAnnotation(ev.Object)
					if err != nil {
						t.Fatal(err)
					}
					if !marked {
						t.Fatalf("bookmark at RV %d before the initial-events-end one", bhRvOf(t, ev.Object))
					}
					end = ev
				default:
					t.Fatalf("during the initial events got %s", bhDescribe(t, ev.Event))
				}
			}
			latency := end.at.Sub(start)
			endRV := bhRvOf(t, end.Object)
			t.Logf("RV %q: end bookmark at RV %d (floor %d) %v after Watch()", requested, endRV, floor, latency.Round(time.Microsecond))
			if len(added) != len(names) {
				t.Errorf("initial events %v, want ADDED for %v", added, names)
			}
			for _, n := range names {
				if rv, ok := added[n]; !ok {
					t.Errorf("no initial ADDED for %s", n)
				} else if rv > endRV {
					t.Errorf("initial %s at RV %d is above the end bookmark's RV %d", n, rv, endRV)
				}
			}
			if endRV < floor {
				t.Errorf("end bookmark at RV %d is below the floor %d", endRV, floor)
			}
			if latency >= 500*time.Millisecond {
				t.Errorf("end bookmark took %v, want well under the %v tick", latency, bhGranularity)
			}

			// A live event after the end bookmark, then a plain heartbeat.
			liveRV := bhRvOf(t, bhCreatePod(ctx, t, e, "wl", "live"))
			sawLive, heartbeats := false, 0
			limit := time.Now().Add(3*bhMaxTick + time.Second)
			for !sawLive || heartbeats == 0 {
				ev := bhNext(t, w, time.Until(limit))
				rv := bhRvOf(t, ev.Object)
				switch ev.Type {
				case watch.Added:
					p := ev.Object.(*example.Pod)
					if sawLive || p.Name != "live" || rv != liveRV || rv <= endRV {
						t.Fatalf("after the end bookmark (RV %d) got %s, want ADDED live@%d once", endRV, bhDescribe(t, ev.Event), liveRV)
					}
					sawLive = true
				case watch.Bookmark:
					if marked, _ := storage.HasInitialEventsEndBookmarkAnnotation(ev.Object); marked {
						t.Errorf("a second initial-events-end bookmark, at RV %d", rv)
					}
					if rv < endRV {
						t.Errorf("heartbeat at RV %d went back behind the end bookmark's RV %d", rv, endRV)
					}
					if sawLive {
						heartbeats++
					}
				default:
					t.Fatalf("after the end bookmark got %s", bhDescribe(t, ev.Event))
				}
			}
		})
	}
}

// TestBehaviourWatchStops: the request's context ending, by cancel or by
// deadline, and the client's Stop all close the result channel.
func TestBehaviourWatchStops(t *testing.T) {
	e := setup(t)
	rv := strconv.FormatUint(bhCurrentRV(context.Background(), t, e), 10)
	open := func(ctx context.Context) watch.Interface {
		t.Helper()
		w, err := e.cacher.Watch(ctx, "/pods/", storage.ListOptions{ResourceVersion: rv, Recursive: true, Predicate: bhEverything(true)})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}

	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		w := open(ctx)
		defer w.Stop()
		// Open until the cancel: it delivers a write made after it opened.
		created := bhCreatePod(context.Background(), t, e, "stops", "cancel")
		if ev := bhNext(t, w, 5*time.Second); ev.Type != watch.Added || ev.Object.(*example.Pod).Name != created.Name {
			t.Fatalf("before its context was cancelled the watch got %s, want ADDED stops/cancel", bhDescribe(t, ev.Event))
		}
		cancelled := time.Now()
		cancel()
		closedAt := bhWaitClosed(t, w, 5*time.Second)
		t.Logf("closed %v after cancel", closedAt.Sub(cancelled).Round(time.Microsecond))
	})

	t.Run("deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		deadline, _ := ctx.Deadline()
		w := open(ctx)
		defer w.Stop()
		closedAt := bhWaitClosed(t, w, time.Until(deadline)+5*time.Second)
		t.Logf("closed %v after the deadline", closedAt.Sub(deadline).Round(time.Microsecond))
		if closedAt.Before(deadline) {
			t.Errorf("watch closed %v before its deadline", deadline.Sub(closedAt))
		}
	})

	t.Run("stop", func(t *testing.T) {
		w := open(context.Background())
		w.Stop()
		bhWaitClosed(t, w, 5*time.Second)
	})

	t.Run("already cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		w, err := e.cacher.Watch(ctx, "/pods/", storage.ListOptions{ResourceVersion: rv, Recursive: true, Predicate: bhEverything(true)})
		if err != nil {
			return // refusing a dead request outright is fine too
		}
		defer w.Stop()
		bhWaitClosed(t, w, 5*time.Second)
	})
}

// TestBehaviourSlowWatchListClientClosedGracefully: with stalling off
// (--watch-cache-stall-slow-watchers=false; on, it stalls and resumes,
// cacher/stall.go), a WatchList client that
// stalls after its initial-events-end bookmark was queued, while writes fill
// its queue, is drained and closed rather than cut off: it still reads its
// initial events, the annotated bookmark and what was queued, in order, then
// the channel closes and it resumes from there without a relist. The cache
// must outlive the next bookmark tick for that watcher (regression: the tick
// used to offer it a bookmark on its closed queue and panic).
func TestBehaviourSlowWatchListClientClosedGracefully(t *testing.T) {
	const buffer = 4
	e := setup(t, withSchedule(time.Second, 500*time.Millisecond, 16*time.Second),
		func(c *cacher.Config) { c.WatcherBuffer = buffer }, withoutStall)
	ctx := context.Background()
	// More initial objects than the watcher's result buffer, so it is still
	// sending them, its end bookmark queued but not delivered, when the
	// writes come.
	const initial = 12
	// A live watch that has heard the last creation proves the dispatcher has
	// handed out every creation, so none is still on its way to the watcher
	// under test, where it would take a queue slot only to be dropped.
	probe, err := e.cacher.Watch(ctx, "/pods/", storage.ListOptions{
		ResourceVersion: strconv.FormatUint(bhCurrentRV(ctx, t, e), 10), Recursive: true, Predicate: bhEverything(false),
	})
	if err != nil {
		t.Fatal(err)
	}
	// The probe is read as the creations go, as its queue is as small as the
	// slow watcher's.
	for i := range initial {
		rv := bhRvOf(t, bhCreatePod(ctx, t, e, "slow", fmt.Sprintf("p%02d", i)))
		for heard := uint64(0); heard < rv; {
			heard = bhRvOf(t, bhNext(t, probe, 5*time.Second).Object)
		}
	}
	probe.Stop()

	w, err := e.cacher.Watch(ctx, "/pods/", storage.ListOptions{
		ResourceVersion: "0", Recursive: true, Predicate: bhEverything(true), SendInitialEvents: ptr.To(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	registered := time.Now()
	var writes []uint64
	for i := range 2 * buffer {
		writes = append(writes, bhRvOf(t, bhRelabelPod(ctx, t, e, "slow", "p00", strconv.Itoa(i))))
	}
	// Stay stalled past the watcher's first heartbeat slot (one frequency
	// after it registered) and the tick that pops it.
	time.Sleep(time.Until(registered.Add(time.Second + 2*bhMaxTick)))
	if !e.cacher.Ready() {
		t.Fatal("cache not ready after the slow watcher was closed")
	}

	events, closed := bhCollect(w, 5*time.Second)
	if !closed {
		t.Fatalf("slow watcher still open after %d events: it should have been closed", len(events))
	}
	added, marked := 0, 0
	// resumeRV is the last RV the client saw, bookmarks included: where a
	// reflector resumes. A bookmark never claims an RV whose event it did
	// not deliver, so resuming there must miss nothing.
	var endRV, resumeRV uint64
	var tail []uint64   // the writes' RVs the client got
	var queued []string // what followed the end bookmark, for the log
	for _, ev := range events {
		switch {
		case ev.Type == watch.Added && marked == 0:
			added++
		case ev.Type == watch.Bookmark:
			rv := bhRvOf(t, ev.Object)
			isEnd, _ := storage.HasInitialEventsEndBookmarkAnnotation(ev.Object)
			switch {
			case isEnd && marked == 0:
				marked++
				endRV = rv
			case isEnd:
				t.Errorf("a second initial-events-end bookmark, at RV %d", rv)
			case marked == 0:
				t.Errorf("plain bookmark at RV %d before the initial-events-end one", rv)
			default:
				queued = append(queued, fmt.Sprintf("bookmark@%d", rv))
			}
			if rv < resumeRV {
				t.Errorf("bookmark at RV %d went back behind RV %d", rv, resumeRV)
			}
			resumeRV = max(resumeRV, rv)
		case ev.Type == watch.Modified && marked == 1:
			rv := bhRvOf(t, ev.Object)
			tail = append(tail, rv)
			queued = append(queued, fmt.Sprintf("MODIFIED@%d", rv))
			if rv <= resumeRV {
				t.Errorf("event at RV %d after RV %d", rv, resumeRV)
			}
			resumeRV = max(resumeRV, rv)
		default:
			t.Errorf("unexpected %s (after %d ADDED, %d end bookmarks)", bhDescribe(t, ev.Event), added, marked)
		}
	}
	t.Logf("slow client read %d ADDED, end bookmark at RV %d, then %v (writes %v), then close",
		added, endRV, queued, writes)
	if added != initial || marked != 1 {
		t.Fatalf("got %d ADDED and %d initial-events-end bookmarks, want %d and 1", added, marked, initial)
	}
	// It was closed because its queue was full, and a graceful close
	// delivers the whole queue.
	if len(queued) != buffer || fmt.Sprint(tail) != fmt.Sprint(writes[:len(tail)]) {
		t.Errorf("after the end bookmark got %v, want its full queue of %d, the writes a prefix of %v", queued, buffer, writes)
	}

	// The client resumes from the last RV it saw and misses nothing.
	resumed, err := e.cacher.Watch(ctx, "/pods/", storage.ListOptions{
		ResourceVersion: strconv.FormatUint(resumeRV, 10), Recursive: true, Predicate: bhEverything(false),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer resumed.Stop()
	var want []uint64
	for _, rv := range writes {
		if rv > resumeRV {
			want = append(want, rv)
		}
	}
	var rest []uint64
	for len(rest) < len(want) {
		ev := bhNext(t, resumed, 5*time.Second)
		if ev.Type != watch.Modified {
			t.Fatalf("resumed watch from RV %d got %s", resumeRV, bhDescribe(t, ev.Event))
		}
		rest = append(rest, bhRvOf(t, ev.Object))
	}
	if got := append(append([]uint64{}, tail...), rest...); fmt.Sprint(got) != fmt.Sprint(writes) {
		t.Errorf("before the close %v and after resuming from RV %d %v: want every write once, in order, %v",
			tail, resumeRV, rest, writes)
	}
}
