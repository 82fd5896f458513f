package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// cpuSample is a stack (leaf first) holding nanos of CPU.
type cpuSample struct {
	nanos int64
	stack []string
}

// writeCPUProfile writes a CPU profile of samples.
func writeCPUProfile(t *testing.T, path string, samples ...cpuSample) {
	t.Helper()
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:     10_000_000,
	}
	fns := map[string]*profile.Function{}
	for _, cs := range samples {
		var locs []*profile.Location
		for _, name := range cs.stack {
			fn := fns[name]
			if fn == nil {
				fn = &profile.Function{ID: uint64(len(fns) + 1), Name: name}
				fns[name] = fn
				p.Function = append(p.Function, fn)
			}
			loc := &profile.Location{ID: uint64(len(p.Location) + 1), Line: []profile.Line{{Function: fn}}}
			p.Location = append(p.Location, loc)
			locs = append(locs, loc)
		}
		p.Sample = append(p.Sample, &profile.Sample{Location: locs, Value: []int64{cs.nanos / p.Period, cs.nanos}})
	}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The restart's profiles are compared beside the steady churn's: the
// restart phase is where the API tail of watchkeeper's runs sat.
func TestReportComparesTheRestartedProcessesCPUProfiles(t *testing.T) {
	dir := t.TempDir()
	wk, up := &result{cache: "watchkeeper"}, &result{cache: "upstream"}
	wk.prof.restartCPUPath = filepath.Join(dir, "wk-restart-cpu.pprof")
	up.prof.restartCPUPath = filepath.Join(dir, "up-restart-cpu.pprof")
	writeCPUProfile(t, wk.prof.restartCPUPath, cpuSample{3e9, []string{"k8s.io/apiserver/pkg/storage/etcd3.(*store).GetList", "github.com/watchkeeper/watchkeeper/cacher.(*Cacher).fillHistory"}})
	writeCPUProfile(t, up.prof.restartCPUPath, cpuSample{1e9, []string{"k8s.io/apiserver/pkg/storage/etcd3.(*store).GetList", "k8s.io/apiserver/pkg/storage/cacher.(*Cacher).startCaching"}})

	var out strings.Builder
	printProfileDiffs(&out, wk, up)
	got := out.String()
	for _, want := range []string{
		"CPU of the restarted process: watchkeeper (" + wk.prof.restartCPUPath,
		"total", "3.00s", "1.00s",
		"k8s.io/apiserver/pkg/storage/etcd3.(*store).GetList",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "heap in use") {
		t.Errorf("the report compares heap profiles that were not taken:\n%s", got)
	}
}

// A write passes through either cache to etcd3; its cost there is not the
// cache's, but the cache's lookup of the current object under it is.
func TestProfilesLeaveWritesPassingThroughOutOfTheCachesCode(t *testing.T) {
	dir := t.TempDir()
	wk, up := filepath.Join(dir, "wk.pprof"), filepath.Join(dir, "up.pprof")
	writeCPUProfile(t, wk,
		cpuSample{4e9, []string{"k8s.io/apiserver/pkg/storage/etcd3.(*store).GuaranteedUpdate", "github.com/watchkeeper/watchkeeper/cacher.(*Cacher).GuaranteedUpdate", "net/http.HandlerFunc.ServeHTTP"}},
		cpuSample{1e9, []string{"github.com/watchkeeper/watchkeeper/cacher.(*Cacher).suggestion", "github.com/watchkeeper/watchkeeper/cacher.(*Cacher).GuaranteedUpdate"}},
		cpuSample{2e9, []string{"github.com/watchkeeper/watchkeeper/cacher.(*Cacher).dispatch"}},
		cpuSample{3e9, []string{"runtime.gcBgMarkWorker"}},
	)
	writeCPUProfile(t, up,
		cpuSample{4e9, []string{"k8s.io/apiserver/pkg/storage/etcd3.(*store).GuaranteedUpdate", "k8s.io/apiserver/pkg/storage/cacher.(*CacheDelegator).GuaranteedUpdate"}},
		cpuSample{1e9, []string{"k8s.io/apiserver/pkg/storage/cacher.(*Cacher).dispatchEvents"}},
		cpuSample{1e9, []string{"k8s.io/apiserver/pkg/storage/etcd3.decodeObj", "k8s.io/apiserver/pkg/storage/etcd3.(*watchChan).transform"}},
		cpuSample{5e9, []string{"runtime.gcBgMarkWorker"}},
	)
	rows, err := topDiff(wk, up, "cpu", 3)
	if err != nil {
		t.Fatal(err)
	}
	fields := func(prefix string) []string {
		for _, r := range rows {
			if strings.HasPrefix(r, prefix) {
				return strings.Fields(strings.TrimPrefix(r, prefix))
			}
		}
		t.Fatalf("no row %q in:\n%s", prefix, strings.Join(rows, "\n"))
		return nil
	}
	if got := fields("the cache's own code"); got[len(got)-2] != "3.00s" || got[len(got)-1] != "1.00s" {
		t.Errorf("the cache's own code: %v, want 3.00s (lookup and dispatch) and 1.00s (dispatch)", got)
	}
	if got := fields("  and etcd3's watch decoding"); got[len(got)-2] != "3.00s" || got[len(got)-1] != "2.00s" {
		t.Errorf("with etcd3's watch decoding: %v, want 3.00s and 2.00s (dispatch and decoding)", got)
	}
	if got := fields("a cache costing nothing"); got[len(got)-2] != "9.00s" || got[len(got)-1] != "0.82x" {
		t.Errorf("a cache costing nothing: %v, want stock's 11s less its 2s, 0.82x", got)
	}
}

func TestHostCPUCountsStealApart(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	h, err := parseHostCPU("cpu  100 10 50 900 40 5 5 30 7 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
	if err != nil {
		t.Fatal(err)
	}
	tick := time.Second / clockTicks
	if want := 200 * tick; h.busy != want {
		t.Errorf("busy %v, want %v (steal in, idle, iowait and guest out)", h.busy, want)
	}
	if want := 30 * tick; h.steal != want {
		t.Errorf("steal %v, want %v", h.steal, want)
	}
	if _, err := parseHostCPU("intr 1 2 3\n"); err == nil {
		t.Error("a first line that is not cpu's parsed")
	}
}
