package httpbench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
	"github.com/watchkeeper/watchkeeper/internal/etcdtest"
)

// TestScenarios runs each scenario once at a tiny size against an embedded
// etcd and a server binary built from this tree, and checks the figures
// are there and plausible. Timing is the benchmark's business, not the
// test's: nothing here bounds a duration.
func TestScenarios(t *testing.T) {
	env := testEnv(t)
	ctx := t.Context()

	t.Run("idle", func(t *testing.T) {
		rs, err := Idle(ctx, env, "watchkeeper", 20)
		if err != nil {
			t.Fatal(err)
		}
		m := byMetric(t, rs, "idle", "watchkeeper", map[string]int{"watchers": 20})
		// Each open watch holds at least the goroutine serving its request:
		// fewer would mean the watches were not open when measured.
		if g := m["goroutines_per_watcher"]; g < 1 {
			t.Errorf("goroutines_per_watcher = %v, want >= 1", g)
		}
		if v := m["open_seconds"]; v <= 0 {
			t.Errorf("open_seconds = %v, want > 0", v)
		}
		mustHave(t, m, "heap_stack_bytes_per_watcher", "rss_bytes_per_watcher")
		wantZero(t, m, "watchers_closed")
		assertNoChildren(t)
	})

	t.Run("bookmarks", func(t *testing.T) {
		rs, err := Bookmarks(ctx, env, "watchkeeper", 20, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		const watchers = 20
		m := byMetric(t, rs, "bookmarks", "watchkeeper", map[string]int{"watchers": watchers, "period_seconds": 5})
		// Deadlines within deadlineSpread of period+2s after the first
		// watch opened make every watch due exactly one bookmark.
		if v, ok := m["bookmarks_delivered"]; !ok || v != watchers {
			t.Errorf("bookmarks_delivered = %v (present %v), want %d", v, ok, watchers)
		}
		for _, k := range []string{"watchers_without_bookmark", "watchers_with_extra_bookmarks", "watchers_at_deadline"} {
			if v, ok := m[k]; ok {
				t.Errorf("%s = %v, want none", k, v)
			}
		}
		// The gadget written every second costs the server something.
		for _, k := range []string{"cpu_seconds_per_second", "cpu_seconds_per_1k_bookmarks"} {
			if v := m[k]; v <= 0 {
				t.Errorf("%s = %v, want > 0", k, v)
			}
		}
		mustHave(t, m, "cpu_seconds_per_second_before_bookmarks", "server_gc_cycles_in_window")
		wantZero(t, m, "watchers_closed")
		assertNoChildren(t)
	})

	for _, decorator := range []string{"watchkeeper", "upstream"} {
		t.Run("fanout/"+decorator, func(t *testing.T) {
			const watchers, events = 20, 20
			rs, err := FanOut(ctx, env, decorator, watchers, events)
			if err != nil {
				t.Fatal(err)
			}
			m := byMetric(t, rs, "fanout", decorator, map[string]int{"watchers": watchers, "events": events})
			if v := m["events_delivered"]; v != watchers*events {
				t.Errorf("events_delivered = %v, want %d", v, watchers*events)
			}
			wantZero(t, m, "events_undelivered")
			wantZero(t, m, "watchers_closed")
			for _, k := range []string{"events_delivered_per_second", "latency_p50", "server_cpu_us_per_event"} {
				if m[k] <= 0 {
					t.Errorf("%s = %v, want > 0", k, m[k])
				}
			}
			for _, q := range []string{"latency", "paced_latency"} {
				if m[q+"_p50"] <= 0 || m[q+"_p99"] < m[q+"_p50"] {
					t.Errorf("%s_p50 %v, %s_p99 %v: want 0 < p50 <= p99", q, m[q+"_p50"], q, m[q+"_p99"])
				}
			}
			assertNoChildren(t)
		})
	}
}

// TestServerKilledOnCancel ends the context in the middle of a run: the
// scenario must return and take its server with it.
func TestServerKilledOnCancel(t *testing.T) {
	env := testEnv(t)
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		// Long enough for the server to be up and the watches open.
		for !hasChildren() && ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
		}
		_ = sleepCtx(ctx, 8*time.Second)
		cancel()
	}()
	_, err := Bookmarks(ctx, env, "watchkeeper", 20, time.Hour)
	cancel()
	if err == nil {
		t.Fatal("Bookmarks returned no error after its context ended")
	}
	t.Logf("error as expected: %v", err)
	assertNoChildren(t)
}

func TestEnvValidation(t *testing.T) {
	_, err := Idle(t.Context(), Env{}, "watchkeeper", 1)
	if err == nil {
		t.Fatal("empty Env accepted")
	}
	env := Env{EtcdEndpoint: "http://127.0.0.1:1", ServerBinary: os.Args[0], WorkDir: t.TempDir()}
	if _, err := FanOut(t.Context(), env, "nonsense", 1, 1); err == nil || !strings.Contains(err.Error(), "nonsense") {
		t.Fatalf("unknown decorator: err = %v", err)
	}
}

// serverBinary is the sample apiserver built from this tree, once for all
// tests (TestMain).
var serverBinary string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "httpbench-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	serverBinary = filepath.Join(dir, "sample-apiserver")
	build := exec.Command("go", "build", "-o", serverBinary, "github.com/watchkeeper/watchkeeper/sample-apiserver")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the sample apiserver: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// testEnv starts an embedded etcd for the test's lifetime.
func testEnv(t *testing.T) Env {
	t.Helper()
	e := etcdtest.Start(t)
	return Env{EtcdEndpoint: e.Endpoints()[0], ServerBinary: serverBinary, WorkDir: t.TempDir(), Quick: true}
}

// byMetric checks the results' common fields and indexes them by metric.
func byMetric(t *testing.T, rs []result.Result, scenario, decorator string, params map[string]int) map[string]float64 {
	t.Helper()
	m := map[string]float64{}
	for _, r := range rs {
		t.Logf("%s %s %v %s = %.4g %s", r.Scenario, r.Decorator, r.Params, r.Metric, r.Value, r.Unit)
		if r.Level != "http" || r.Scenario != scenario || r.Decorator != decorator {
			t.Errorf("result %+v: want level http, scenario %s, decorator %s", r, scenario, decorator)
		}
		if r.Better != "lower" && r.Better != "higher" {
			t.Errorf("result %s: better = %q", r.Metric, r.Better)
		}
		if r.Unit == "" {
			t.Errorf("result %s: no unit", r.Metric)
		}
		for k, v := range params {
			if r.Params[k] != v {
				t.Errorf("result %s: params %v, want %s=%d", r.Metric, r.Params, k, v)
			}
		}
		if _, dup := m[r.Metric]; dup {
			t.Errorf("metric %s reported twice", r.Metric)
		}
		m[r.Metric] = r.Value
	}
	return m
}

func mustHave(t *testing.T, m map[string]float64, metrics ...string) {
	t.Helper()
	for _, k := range metrics {
		if _, ok := m[k]; !ok {
			t.Errorf("metric %s missing", k)
		}
	}
}

func wantZero(t *testing.T, m map[string]float64, metric string) {
	t.Helper()
	v, ok := m[metric]
	if !ok {
		t.Errorf("metric %s missing", metric)
	} else if v != 0 {
		t.Errorf("%s = %v, want 0", metric, v)
	}
}

// assertNoChildren checks that no server process outlived its scenario.
func assertNoChildren(t *testing.T) {
	t.Helper()
	if kids := children(); len(kids) > 0 {
		t.Errorf("child processes left behind: %v", kids)
	}
}

func hasChildren() bool { return len(children()) > 0 }

// children lists this process's live children, from every thread's
// /proc children file (a child belongs to the thread that forked it).
func children() []string {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil
	}
	var out []string
	for _, task := range tasks {
		data, err := os.ReadFile(filepath.Join("/proc/self/task", task.Name(), "children"))
		if err != nil {
			continue
		}
		out = append(out, strings.Fields(string(data))...)
	}
	return out
}
