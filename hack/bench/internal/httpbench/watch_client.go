package httpbench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watchkeeper/watchkeeper/internal/histogram"
	"github.com/watchkeeper/watchkeeper/internal/watchstream"
)

// openConcurrency bounds the watch requests in flight while opening: enough
// to keep both cores busy, few enough not to queue thousands of handshakes
// and stream openings at once.
const openConcurrency = 32

// watchSpec is what every watch of a set asks for.
type watchSpec struct {
	path            string // collection path, e.g. /apis/demo.watchkeeper.io/v1alpha1/namespaces/bench/widgets
	resourceVersion string
	// timeout is sent as timeoutSeconds, in whole seconds: the apiserver
	// gives the storage watch a context deadline of timeout after its
	// handler starts. Every scenario but bookmarks asks for more than the
	// run lasts, so no watch ends on its deadline.
	timeout time.Duration
	// deadline, if set, replaces timeout: each watch asks for the whole
	// seconds from its own request to deadline, rounded up, and is sent
	// only when that puts its server deadline less than deadlineSpread
	// after deadline (and a little later, by how long a handler takes to
	// start), however long opening them all takes.
	deadline time.Time
}

// deadlineSpread bounds how far after watchSpec.deadline a watch's own
// deadline falls. Whole-second timeouts alone spread them over a second,
// which with both caches' one-second slots and ticks of up to 1.25s would
// put some pre-deadline bookmarks past the first deadline.
const deadlineSpread = 250 * time.Millisecond

// timeoutAt is the timeout a watch whose request goes out at sent asks for.
func (w watchSpec) timeoutAt(sent time.Time) time.Duration {
	if w.deadline.IsZero() {
		return w.timeout
	}
	return (w.deadline.Sub(sent) + time.Second - 1).Truncate(time.Second)
}

// sendAt is the earliest time from now at which a watch request gets a
// deadline less than deadlineSpread after w.deadline: now itself without a
// deadline.
func (w watchSpec) sendAt(now time.Time) time.Time {
	if w.deadline.IsZero() {
		return now
	}
	if now.Add(w.timeoutAt(now)).Sub(w.deadline) < deadlineSpread {
		return now
	}
	// Wait for the next whole second before the deadline: from there
	// the rounding up adds nothing.
	return now.Add(w.deadline.Sub(now) % time.Second)
}

func (w watchSpec) url(base string, sent time.Time) string {
	q := url.Values{}
	q.Set("watch", "true")
	q.Set("allowWatchBookmarks", "true")
	q.Set("resourceVersion", w.resourceVersion)
	q.Set("timeoutSeconds", strconv.Itoa(int(w.timeoutAt(sent)/time.Second)))
	return base + w.path + "?" + q.Encode()
}

// watchSet is n open watches, each read by a consumer goroutine that counts
// what it hears.
type watchSet struct {
	pool     *watchstream.Pool
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	stopping atomic.Bool
	// latency, if set, gets write -> receipt of every annotated object event
	// written before pacedFrom (UnixNano; 0 none); paced gets the ones
	// written at or after it.
	latency   *histogram.Histogram
	paced     histogram.Histogram
	pacedFrom atomic.Int64

	// spec is what the watches asked for.
	spec watchSpec

	objects   atomic.Int64 // ADDED/MODIFIED/DELETED received, over all watches
	bookmarks atomic.Int64
	// perWatch counts each watch's bookmarks, in the order they were
	// opened; bookmarked counts the watches with at least one, and
	// allBookmarked is closed when that is every watch.
	perWatch      []atomic.Int32
	bookmarked    atomic.Int64
	allBookmarked chan struct{}
	closed        atomic.Int64 // watches that ended while still being read, before their deadline
	// expired counts watches that ended cleanly once their timeoutSeconds
	// had run out: the server ending them as asked, not a failure.
	expired     atomic.Int64
	lastReceipt atomic.Int64 // UnixNano of the latest object event

	mu           sync.Mutex
	closeReasons map[string]int
}

// maxCloseReasons bounds the distinct reasons kept for the error report.
const maxCloseReasons = 8

// openWatches opens n watches and returns once every one has its response
// headers (the apiserver flushes them as soon as the watch is set up). On
// error no watch is left open.
func openWatches(ctx context.Context, s *serverProcess, spec watchSpec, n int, latency *histogram.Histogram) (*watchSet, error) {
	pool, err := watchstream.NewPool(ctx, s.TLS, s.URL, s.Token, n, http2StreamsPerConnection)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	ws := &watchSet{pool: pool, cancel: cancel, latency: latency, closeReasons: map[string]int{},
		spec: spec, perWatch: make([]atomic.Int32, n), allBookmarked: make(chan struct{})}

	sem := make(chan struct{}, openConcurrency)
	var opening sync.WaitGroup
	var openErr error
	var openErrOnce sync.Once
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-wctx.Done():
		}
		if wctx.Err() != nil {
			break
		}
		opening.Add(1)
		ws.wg.Add(1)
		go func(i int, c *http.Client) {
			defer ws.wg.Done()
			err := sleepCtx(wctx, time.Until(spec.sendAt(time.Now())))
			sent := time.Now()
			var body io.ReadCloser
			if err == nil {
				body, err = openWatch(wctx, c, spec.url(s.URL, sent), s.Token)
			}
			if err != nil {
				openErrOnce.Do(func() {
					openErr = err
					cancel()
				})
			}
			<-sem
			opening.Done()
			if err == nil {
				ws.consume(body, i, sent)
			}
		}(i, pool.Client(i))
	}
	opening.Wait()
	if openErr == nil && wctx.Err() != nil {
		openErr = wctx.Err()
	}
	if openErr != nil {
		ws.stop()
		return nil, fmt.Errorf("opening %d watches: %w", n, openErr)
	}
	return ws, nil
}

func openWatch(ctx context.Context, c *http.Client, target, token string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		return nil, fmt.Errorf("watch answered %d: %s", resp.StatusCode, msg)
	}
	return resp.Body, nil
}

// consume reads watch i, whose request went out at sent, until it ends.
func (ws *watchSet) consume(body io.ReadCloser, i int, sent time.Time) {
	defer body.Close()
	lr := watchstream.NewLines(bufio.NewReaderSize(body, 4096))
	for {
		line, err := lr.Next()
		if err != nil {
			ws.ended(err, sent)
			return
		}
		now := time.Now()
		kind, at := classify(line)
		switch kind {
		case eventObject:
			ws.objects.Add(1)
			ws.noteReceipt(now.UnixNano())
			if ws.latency != nil && at > 0 {
				if from := ws.pacedFrom.Load(); from > 0 && at >= from {
					ws.paced.Record(now.Sub(time.Unix(0, at)))
				} else {
					ws.latency.Record(now.Sub(time.Unix(0, at)))
				}
			}
		case eventBookmark:
			ws.bookmarks.Add(1)
			if ws.perWatch[i].Add(1) == 1 && ws.bookmarked.Add(1) == int64(len(ws.perWatch)) {
				close(ws.allBookmarked)
			}
		case eventError:
			// The server ends the stream after an ERROR event.
			ws.ended(errors.New(errorMessage(line)), sent)
			return
		}
	}
}

func (ws *watchSet) noteReceipt(t int64) {
	for {
		old := ws.lastReceipt.Load()
		if t <= old || ws.lastReceipt.CompareAndSwap(old, t) {
			return
		}
	}
}

// ended counts a watch that stopped on its own; the ones we stop do not
// count, and one the server ended cleanly at its deadline counts as
// expired. The server's deadline is the timeout after its handler started,
// which is after sent, so an end before sent+timeout came early.
func (ws *watchSet) ended(err error, sent time.Time) {
	if ws.stopping.Load() {
		return
	}
	if errors.Is(err, io.EOF) && !time.Now().Before(sent.Add(ws.spec.timeoutAt(sent))) {
		ws.expired.Add(1)
		return
	}
	ws.closed.Add(1)
	reason := "stream ended"
	if err != nil && !errors.Is(err, io.EOF) {
		reason = err.Error()
	}
	ws.mu.Lock()
	if _, ok := ws.closeReasons[reason]; ok || len(ws.closeReasons) < maxCloseReasons {
		ws.closeReasons[reason]++
	}
	ws.mu.Unlock()
}

// bookmarkCounts is how many watches got no bookmark and how many got more
// than one.
func (ws *watchSet) bookmarkCounts() (none, extra int) {
	for i := range ws.perWatch {
		switch n := ws.perWatch[i].Load(); {
		case n == 0:
			none++
		case n > 1:
			extra++
		}
	}
	return none, extra
}

// closeSummary says why watches closed, for an error or a log line.
func (ws *watchSet) closeSummary() string {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return fmt.Sprint(ws.closeReasons)
}

// stop ends every watch and waits for its consumer. From here on a watch
// that ends is not counted as closed.
func (ws *watchSet) stop() {
	ws.stopping.Store(true)
	ws.cancel()
	ws.wg.Wait()
	ws.pool.Close()
}
