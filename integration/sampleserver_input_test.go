package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/cli"
	"k8s.io/klog/v2"

	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/server"
)

// What the sample apiserver answers to bad input: malformed
// resourceVersions and selectors (400), missing credentials (401), bad
// flags (a non-zero exit listing every problem, before anything binds).

// siAnswer is what the server said to one request.
type siAnswer struct {
	Code   int
	Status *metav1.Status // the Status body, or the first ERROR event of a 200 watch
	Body   string         // the body, or a 200 watch's first event, described
	Header http.Header
	// Took is until the status line, or until a 200 watch closed or its
	// read window passed.
	Took time.Duration
	// Watch: the request was a watch; for a 200 one, the events read and
	// whether the server ended the stream within the read window.
	Watch  bool
	Events []watch.Event
	Closed bool
}

// siGet sends GET path?query with the admin's credentials, or none. A 200
// watch is read for 2s: an apiserver may report a bad watch in the stream.
func siGet(ctx context.Context, t *testing.T, s *sampleServer, anonymous bool, path string, query url.Values) siAnswer {
	t.Helper()
	cfg := s.Admin
	if anonymous {
		cfg = s.Anonymous
	}
	return siDo(ctx, t, s, cfg, http.MethodGet, path, query, nil, 2*time.Second)
}

// siDo sends method path?query, with body as JSON (a merge patch for PATCH)
// unless nil, with cfg's credentials and TLS. A 200 watch is read until the
// server closes it or window passes, whichever is first; then the client
// hangs up.
func siDo(ctx context.Context, t *testing.T, s *sampleServer, cfg *rest.Config, method, path string, query url.Values, body []byte, window time.Duration) siAnswer {
	t.Helper()
	tr, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	u := s.URL + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	// The outcome is what is checked, not how fast it comes: a 2MiB body
	// takes the server (decoding, validation, managed fields, under -race)
	// 6s alone and took over 20s with make test and a cold build beside it.
	ctx, cancel := context.WithTimeout(ctx, time.Minute+window)
	defer cancel()
	var reader io.Reader
	if body != nil {
		reader = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, reader)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case body == nil:
	case method == http.MethodPatch:
		req.Header.Set("Content-Type", "application/merge-patch+json")
	default:
		req.Header.Set("Content-Type", "application/json")
	}
	start := time.Now()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	a := siAnswer{Code: resp.StatusCode, Header: resp.Header, Watch: query.Get("watch") != ""}
	if resp.StatusCode == http.StatusOK && a.Watch {
		w := ssStream(resp)
		defer w.Stop()
		timer := time.NewTimer(window)
		defer timer.Stop()
	read:
		for {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					a.Closed = true
					break read
				}
				a.Events = append(a.Events, ev)
				if st, isStatus := ev.Object.(*metav1.Status); ev.Type == watch.Error && isStatus && a.Status == nil {
					a.Status = st
				}
			case <-timer.C:
				break read
			}
		}
		a.Took = time.Since(start)
		if len(a.Events) > 0 {
			a.Body = ssDescribe(a.Events[0])
		} else if !a.Closed {
			a.Body = fmt.Sprintf("(open watch, no event within %v)", window)
		}
		return a
	}
	data, _ := io.ReadAll(resp.Body)
	a.Took = time.Since(start)
	a.Body = strings.TrimSpace(string(data))
	st := &metav1.Status{}
	if json.Unmarshal(data, st) == nil && st.Kind == "Status" {
		a.Status = st
	}
	return a
}

func (a siAnswer) String() string {
	if a.Status != nil {
		return fmt.Sprintf("HTTP %d, Status code %d reason %q message %q", a.Code, a.Status.Code, a.Status.Reason, a.Status.Message)
	}
	body := a.Body
	if len(body) > 300 {
		body = body[:300] + "..."
	}
	return fmt.Sprintf("HTTP %d %s", a.Code, body)
}

// TestSampleServerRejectsBadInput: malformed resourceVersions and selectors
// are the client's fault (400, or 422 for a get's resourceVersion), on list,
// watch and get; a resource request without credentials is 401; the health
// endpoints answer anyone.
//
// A get or a watch at a malformed resourceVersion gets the storage package's
// InvalidError from the cache, as from etcd3 and upstream's cache (the
// storage conformance suite pins it since 1.38): the registry answers a
// get's 422 Invalid, and the watch handler a watch's 500, as for upstream's
// cache. The 500 is a known gap: the client's fault should be a 400.
func TestSampleServerRejectsBadInput(t *testing.T) {
	s := startSampleServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), ssTestDeadline)
	defer cancel()
	const ns = "input"
	if _, err := s.Client.DemoV1alpha1().Widgets(ns).Create(ctx, ssWidget(ns, "w1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	list := ssWidgetsPath(ns)

	const bad, invalid, knownGap = http.StatusBadRequest, http.StatusUnprocessableEntity, http.StatusInternalServerError
	for _, tc := range []struct {
		name  string
		path  string
		query url.Values
		want  int
	}{
		{"list rv=abc", list, url.Values{"resourceVersion": {"abc"}}, bad},
		{"list rv=-1", list, url.Values{"resourceVersion": {"-1"}}, bad},
		{"list rv=abc match=NotOlderThan", list, url.Values{"resourceVersion": {"abc"}, "resourceVersionMatch": {"NotOlderThan"}}, bad},
		{"watch rv=abc", list, url.Values{"watch": {"1"}, "resourceVersion": {"abc"}}, knownGap},
		{"watch rv=-1", list, url.Values{"watch": {"1"}, "resourceVersion": {"-1"}}, knownGap},
		{"get rv=abc", list + "/w1", url.Values{"resourceVersion": {"abc"}}, invalid},
		{"list labelSelector=a=(", list, url.Values{"labelSelector": {"a=("}}, bad},
		{"watch labelSelector=a=(", list, url.Values{"watch": {"1"}, "labelSelector": {"a=("}}, bad},
		{"list fieldSelector=spec.size>3", list, url.Values{"fieldSelector": {"spec.size>3"}}, bad},
		{"watch fieldSelector=spec.size>3", list, url.Values{"watch": {"1"}, "fieldSelector": {"spec.size>3"}}, bad},
		{"list fieldSelector=nosuch.field=x", list, url.Values{"fieldSelector": {"nosuch.field=x"}}, bad},
		{"watch fieldSelector=nosuch.field=x", list, url.Values{"watch": {"1"}, "fieldSelector": {"nosuch.field=x"}}, bad},
		{"gadgets list fieldSelector=spec.size=3", ssGroupPath + "/gadgets", url.Values{"fieldSelector": {"spec.size=3"}}, bad},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := siGet(ctx, t, s, false, tc.path, tc.query)
			t.Logf("GET %s?%s -> %s", tc.path, tc.query.Encode(), a)
			code := a.Code
			if code == http.StatusOK && a.Status != nil {
				code = int(a.Status.Code) // reported in the watch stream
			}
			if code != tc.want {
				t.Errorf("GET %s?%s = %s, want %d %s", tc.path, tc.query.Encode(), a, tc.want, http.StatusText(tc.want))
			}
			if a.Code != tc.want {
				t.Errorf("want the %d as the HTTP status, got HTTP %d", tc.want, a.Code)
			}
		})
	}

	t.Run("anonymous", func(t *testing.T) {
		for _, tc := range []struct {
			path  string
			query url.Values
			want  int
		}{
			{list, nil, http.StatusUnauthorized},
			{list + "/w1", nil, http.StatusUnauthorized},
			{list, url.Values{"watch": {"1"}}, http.StatusUnauthorized},
			{ssGroupPath + "/gadgets", nil, http.StatusUnauthorized},
			{ssGroupPath, nil, http.StatusUnauthorized},
			{"/healthz", nil, http.StatusOK},
			{"/livez", nil, http.StatusOK},
			{"/readyz", nil, http.StatusOK},
			{"/readyz/watch-caches", nil, http.StatusOK},
		} {
			a := siGet(ctx, t, s, true, tc.path, tc.query)
			t.Logf("anonymous GET %s?%s -> HTTP %d", tc.path, tc.query.Encode(), a.Code)
			if a.Code != tc.want {
				t.Errorf("anonymous GET %s?%s = %s, want %d", tc.path, tc.query.Encode(), a, tc.want)
			}
		}
	})
}

// siLockedBuffer is an io.Writer safe for klog and cobra at once.
type siLockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *siLockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *siLockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// siRunCommand runs the sample apiserver's command line as main would, and
// returns its exit code and everything it wrote (cobra's stdout and stderr,
// and klog, where cli.Run reports a failed command).
func siRunCommand(t *testing.T, args ...string) (int, string) {
	t.Helper()
	out := &siLockedBuffer{}
	// An ERROR record is written to the ERROR, WARNING and INFO outputs:
	// keep one copy.
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	klog.SetOutputBySeverity("INFO", out)
	defer func() {
		klog.Flush()
		klog.SetOutput(os.Stderr)
		klog.LogToStderr(true)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := server.NewCommand(ctx, out)
	cmd.SetArgs(args)
	cmd.SetOut(out)
	cmd.SetErr(out)
	done := make(chan int, 1)
	go func() { done <- cli.Run(cmd) }()
	select {
	case code := <-done:
		klog.Flush()
		return code, out.String()
	case <-time.After(25 * time.Second):
		t.Fatalf("command %v still running after 25s; output:\n%s", args, out.String())
	}
	return 0, ""
}

func siDirEmpty(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("the failed command left %s in its data directory", e.Name())
	}
}

// TestSampleServerRejectsBadFlags: invalid flags make the command exit
// non-zero, listing every problem, before it starts etcd or binds a port.
func TestSampleServerRejectsBadFlags(t *testing.T) {
	port := freeLoopbackPort(t)
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{
			name: "every problem listed",
			args: []string{"--watch-cache-bookmark-frequency=0", "--watch-cache-bookmark-jitter=2", "--secure-port=-5"},
			want: []string{"--watch-cache-bookmark-frequency=0s", "--watch-cache-bookmark-jitter=2", "--secure-port -5"},
		},
		{
			name: "nothing binds",
			args: []string{"--watch-cache-bookmark-frequency=0", "--watch-cache-bookmark-jitter=2",
				"--watch-cache-bookmark-pre-deadline-offset=-1s", "--secure-port=" + strconv.Itoa(port)},
			want: []string{"--watch-cache-bookmark-frequency=0s", "--watch-cache-bookmark-jitter=2",
				"--watch-cache-bookmark-pre-deadline-offset=-1s"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			code, out := siRunCommand(t, append(tc.args, "--data-dir="+dir)...)
			t.Logf("exit %d, output:\n%s", code, out)
			if code == 0 {
				t.Errorf("exit code 0, want non-zero")
			}
			for _, want := range tc.want {
				if !strings.Contains(out, want) {
					t.Errorf("output does not name %q", want)
				}
			}
			// Nothing started: the port is free and the data directory empty.
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			if err != nil {
				t.Errorf("port %d is taken after the failed command: %v", port, err)
			} else {
				l.Close()
			}
			siDirEmpty(t, dir)
		})
	}
}
