package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/pprof/profile"

	"github.com/watchkeeper/watchkeeper/e2e/internal/kubecluster"
	"github.com/watchkeeper/watchkeeper/internal/childserver"
)

// clockTicks is the unit of /proc/stat's times (USER_HZ, 100 on Linux).
const clockTicks = 100

// procUsage is a process's CPU time so far and its peak resident set.
type procUsage struct {
	cpu     time.Duration
	peakRSS int64 // bytes
}

func readProc(pid int) (procUsage, error) {
	var u procUsage
	cpu, err := childserver.ProcCPUSeconds(pid)
	if err != nil {
		return u, err
	}
	u.cpu = time.Duration(cpu * float64(time.Second))
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			u.peakRSS = kb * 1024
		}
	}
	return u, nil
}

// hostTimes is the machine's CPU time so far: busy is every process's
// and the time the hypervisor ran something else while this machine had
// work (steal); steal is that alone. On a shared host steal moves one
// cache's latencies and not the other's: the report shows it apart.
type hostTimes struct{ busy, steal time.Duration }

func (h hostTimes) sub(o hostTimes) hostTimes {
	return hostTimes{busy: h.busy - o.busy, steal: h.steal - o.steal}
}

func hostCPU() (hostTimes, error) {
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return hostTimes{}, err
	}
	return parseHostCPU(string(stat))
}

// parseHostCPU reads /proc/stat's cpu line: user nice system idle iowait
// irq softirq steal (guest time is already in user).
func parseHostCPU(stat string) (hostTimes, error) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return hostTimes{}, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var busy, steal int64
	for i, v := range f[1:9] {
		if i == 3 || i == 4 {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return hostTimes{}, fmt.Errorf("/proc/stat: %w", err)
		}
		busy += n
		if i == 7 {
			steal = n
		}
	}
	tick := func(n int64) time.Duration { return time.Duration(n) * time.Second / clockTicks }
	return hostTimes{busy: tick(busy), steal: tick(steal)}, nil
}

// cpuOf is the CPU time the processes pids have used so far.
func cpuOf(pids ...int) (time.Duration, error) {
	var sum time.Duration
	for _, pid := range pids {
		u, err := readProc(pid)
		if err != nil {
			return 0, err
		}
		sum += u.cpu
	}
	return sum, nil
}

// cachePackages are the function-name prefixes whose allocations count as
// the watch cache's heap: either cache's own package, and etcd3's watch
// decoding (which both caches' storage watch runs, and only they do for
// cached resources: its objects are the caches' contents and events).
var cachePackages = []string{
	"github.com/watchkeeper/watchkeeper/cacher.",
	"k8s.io/apiserver/pkg/storage/cacher.",
	"k8s.io/apiserver/pkg/storage/etcd3.(*watchChan).",
}

// heapUse is a heap profile's in-use bytes, in total and attributed to the
// caches (any frame of an allocation's stack in cachePackages).
type heapUse struct {
	total, caches int64
}

func fetchProfile(ctx context.Context, s *kubecluster.Server, path string, timeout time.Duration) ([]byte, error) {
	code, body, err := s.GetBytes(ctx, path, timeout)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("%s: %d %s", path, code, firstLine(string(body)))
	}
	return body, nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func heapOf(data []byte) (heapUse, error) {
	var h heapUse
	p, err := profile.Parse(bytes.NewReader(data))
	if err != nil {
		return h, err
	}
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "inuse_space" {
			idx = i
		}
	}
	if idx < 0 {
		return h, fmt.Errorf("no inuse_space in the heap profile")
	}
	for _, s := range p.Sample {
		v := s.Value[idx]
		h.total += v
		if stackIn(s, cachePackages) {
			h.caches += v
		}
	}
	return h, nil
}

// stackIn says whether a sample is the caches' work: a frame of one of
// prefixes other than a cache's write entry points. A write passes through
// the cache to etcd3 (writeEntries), and what it costs there (admission's
// callbacks, managed fields, etcd) is no cache's; the cache's part of it,
// the lookup of the current object, has frames of its own under the entry.
func stackIn(s *profile.Sample, prefixes []string) bool {
	for _, loc := range s.Location {
		for _, line := range loc.Line {
			if line.Function == nil || isWriteEntry(line.Function.Name) {
				continue
			}
			for _, p := range prefixes {
				if strings.HasPrefix(line.Function.Name, p) {
					return true
				}
			}
		}
	}
	return false
}

// writeEntries are the storage.Interface writes both caches pass on to
// etcd3 (upstream's through its CacheDelegator).
var writeEntries = []string{").GuaranteedUpdate", ").Create", ").Delete"}

func isWriteEntry(name string) bool {
	for _, w := range writeEntries {
		if strings.HasSuffix(name, w) {
			return true
		}
	}
	return false
}

// profiles are a server's CPU profile (a window of the steady churn), its
// heap profile, and the restarted process's CPU profile (restartProfile),
// saved in dir.
type profiles struct {
	cpuPath, heapPath, restartCPUPath string
}

// ownCachePackages are the two caches' own code, without the etcd3 watch
// both run.
var ownCachePackages = cachePackages[:2]

// topDiff compares two profiles of the same kind (sampleType: cpu,
// inuse_space) of the two servers. First the caches' own code (samples
// with a frame in either cache's package); then, of the functions both
// profiles have (the code the servers share: handlers, etcd3, encoding,
// the runtime), the n whose cumulative value (as pprof -top -cum) differs
// most. A function of one cache only has no counterpart to compare with:
// the first line covers them.
func topDiff(aPath, bPath string, sampleType string, n int) ([]string, error) {
	a, err := cumValues(aPath, sampleType)
	if err != nil {
		return nil, err
	}
	b, err := cumValues(bPath, sampleType)
	if err != nil {
		return nil, err
	}
	out := []string{
		fmt.Sprintf("%-72s %10s %10s", "total", a.format(a.total), b.format(b.total)),
		fmt.Sprintf("%-72s %10s %10s", "the cache's own code (cacher frames; writes passing through left out)", a.format(a.cache), b.format(b.cache)),
		fmt.Sprintf("%-72s %10s %10s", "  and etcd3's watch decoding, which only the caches' own watches run", a.format(a.caches), b.format(b.caches)),
		// The floor of the ratio: what watchkeeper's server would take if
		// its cache cost nothing and the rest were as in stock's.
		fmt.Sprintf("%-72s %10s %10s  %.2fx", "a cache costing nothing: stock's total less both lines above", "", b.format(b.total-b.caches), safeRatio(b.total-b.caches, b.total)),
	}
	type row struct {
		name   string
		va, vb float64
	}
	var rows []row
	for name, va := range a.cum {
		if vb, ok := b.cum[name]; ok {
			rows = append(rows, row{name, va, vb})
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		return math.Abs(rows[i].va-rows[i].vb) > math.Abs(rows[j].va-rows[j].vb)
	})
	for _, r := range rows[:min(n, len(rows))] {
		name := r.name
		if len(name) > 72 {
			name = name[:69] + "..."
		}
		out = append(out, fmt.Sprintf("%-72s %10s %10s", name, a.format(r.va), b.format(r.vb)))
	}
	return out, nil
}

// profileValues are a profile's values of one sample type: in total, in
// samples with a frame of the caches' own code, and per function
// cumulative (each function counted once per sample).
type profileValues struct {
	unit         string
	total, cache float64
	// caches adds etcd3's watch decoding (cachePackages) to cache.
	caches float64
	cum    map[string]float64
}

func (p profileValues) format(v float64) string {
	if p.unit == "bytes" {
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	}
	return fmt.Sprintf("%.2fs", v/1e9) // nanoseconds
}

func cumValues(path, sampleType string) (profileValues, error) {
	pv := profileValues{cum: map[string]float64{}}
	f, err := os.Open(path)
	if err != nil {
		return pv, err
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		return pv, err
	}
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == sampleType {
			idx, pv.unit = i, st.Unit
		}
	}
	if idx < 0 {
		return pv, fmt.Errorf("%s: no %s", filepath.Base(path), sampleType)
	}
	for _, s := range p.Sample {
		v := float64(s.Value[idx])
		pv.total += v
		if stackIn(s, ownCachePackages) {
			pv.cache += v
		}
		if stackIn(s, cachePackages) {
			pv.caches += v
		}
		seen := map[string]bool{}
		for _, loc := range s.Location {
			for _, line := range loc.Line {
				if line.Function == nil || seen[line.Function.Name] {
					continue
				}
				seen[line.Function.Name] = true
				pv.cum[line.Function.Name] += v
			}
		}
	}
	return pv, nil
}
