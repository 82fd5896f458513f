package httpbench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
)

// clockTicksPerSecond is USER_HZ, the unit of utime and stime in
// /proc/<pid>/stat. Linux fixes it at 100 in its ABI whatever the kernel's
// HZ (`getconf CLK_TCK`), and Go has no sysconf to ask.
const clockTicksPerSecond = 100

// serverSample is the server process seen at one instant.
type serverSample struct {
	cpuSeconds float64 // user + system since the process started
	rssBytes   float64
	heapBytes  float64 // go_memstats_heap_alloc_bytes
	stackBytes float64 // go_memstats_stack_inuse_bytes
	goroutines float64
}

// sampleCPU reads only the process's CPU time: cheap, and it costs the
// server nothing, so it can bracket a workload tightly.
func (s *serverProcess) sampleCPU() (float64, error) {
	return procCPUSeconds(s.pid)
}

// sampleMemory first makes the server collect its garbage, so heap_alloc
// is the live heap rather than the live heap plus whatever garbage the
// last GC cycle happened to leave; a per-watcher figure from the
// difference of two uncollected heaps is mostly noise. net/http/pprof's
// heap handler runs runtime.GC when asked with gc=1, and the generic
// apiserver serves it (profiling is on by default).
func (s *serverProcess) sampleMemory(ctx context.Context) (serverSample, error) {
	var out serverSample
	code, _, err := s.get(ctx, "/debug/pprof/heap?gc=1")
	if err != nil {
		return out, fmt.Errorf("forcing a GC in the server: %w", err)
	}
	if code != http.StatusOK {
		return out, fmt.Errorf("forcing a GC in the server: /debug/pprof/heap answered %d (is --profiling off?)", code)
	}
	code, body, err := s.get(ctx, "/metrics")
	if err != nil {
		return out, fmt.Errorf("scraping /metrics: %w", err)
	}
	if code != http.StatusOK {
		return out, fmt.Errorf("scraping /metrics: status %d", code)
	}
	m, err := parseMetrics(body, "go_memstats_heap_alloc_bytes", "go_memstats_stack_inuse_bytes", "go_goroutines")
	if err != nil {
		return out, err
	}
	out.heapBytes, out.stackBytes, out.goroutines = m[0], m[1], m[2]
	if out.rssBytes, err = procRSSBytes(s.pid); err != nil {
		return out, err
	}
	if out.cpuSeconds, err = procCPUSeconds(s.pid); err != nil {
		return out, err
	}
	return out, nil
}

// parseMetrics returns the values of the named unlabelled series of a
// Prometheus text exposition, in the order asked; a missing one is an error.
func parseMetrics(body []byte, names ...string) ([]float64, error) {
	out := make([]float64, len(names))
	found := make([]bool, len(names))
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		for i, n := range names {
			if name != n {
				continue
			}
			// A timestamp may follow the value.
			value, _, _ = strings.Cut(strings.TrimSpace(value), " ")
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return nil, fmt.Errorf("metric %s: %w", n, err)
			}
			out[i], found[i] = v, true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for i, ok := range found {
		if !ok {
			return nil, fmt.Errorf("metric %s not in the server's /metrics", names[i])
		}
	}
	return out, nil
}

// procCPUSeconds is utime + stime of the process, from /proc/<pid>/stat.
func procCPUSeconds(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseProcStatCPU(data)
}

func parseProcStatCPU(data []byte) (float64, error) {
	// The command name (field 2) is in parentheses and may hold spaces and
	// parentheses itself: split after the last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc stat: %q", data)
	}
	// From field 3 (state) on; utime and stime are fields 14 and 15.
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("malformed /proc stat: %q", data)
	}
	utime, err := strconv.ParseUint(fields[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("utime: %w", err)
	}
	stime, err := strconv.ParseUint(fields[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stime: %w", err)
	}
	return float64(utime+stime) / clockTicksPerSecond, nil
}

// procRSSBytes is VmRSS from /proc/<pid>/status.
func procRSSBytes(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return parseVmRSS(data)
}

func parseVmRSS(data []byte) (float64, error) {
	for line := range strings.SplitSeq(string(data), "\n") {
		rest, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("unexpected VmRSS line %q", line)
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, err
		}
		return float64(kb) * 1024, nil
	}
	return 0, fmt.Errorf("no VmRSS in /proc status")
}
