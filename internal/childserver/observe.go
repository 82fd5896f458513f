package childserver

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

// Metrics scrapes /metrics and returns the values of the named unlabelled
// series (go_goroutines, ...), in the order asked.
func (p *Process) Metrics(ctx context.Context, names ...string) ([]float64, error) {
	body, err := p.scrape(ctx)
	if err != nil {
		return nil, err
	}
	return ParseMetrics(body, names...)
}

// scrape is the server's /metrics exposition.
func (p *Process) scrape(ctx context.Context) ([]byte, error) {
	code, body, err := p.Get(ctx, "/metrics")
	if err != nil {
		return nil, fmt.Errorf("scraping /metrics: %w", err)
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("scraping /metrics: status %d", code)
	}
	return body, nil
}

// ParseMetrics returns the values of the named series (a name, or a name
// with its labels as the exposition writes them) of a Prometheus text
// exposition, in the order asked; a missing one is an error.
func ParseMetrics(body []byte, names ...string) ([]float64, error) {
	out := make([]float64, len(names))
	found := make([]bool, len(names))
	err := eachSample(body, names, false, func(i int, v float64) {
		out[i], found[i] = v, true
	})
	if err != nil {
		return nil, err
	}
	for i, ok := range found {
		if !ok {
			return nil, fmt.Errorf("metric %s not in the server's /metrics", names[i])
		}
	}
	return out, nil
}

// MetricSums scrapes /metrics and returns, for each name asked, the sum
// of all its series whatever their labels (0 when it has none yet): a
// counter such as apiserver_terminated_watchers_total, over every resource.
func (p *Process) MetricSums(ctx context.Context, names ...string) ([]float64, error) {
	body, err := p.scrape(ctx)
	if err != nil {
		return nil, err
	}
	return ParseMetricSums(body, names...)
}

// ParseMetricSums returns, for each name, the sum of the values of all its
// series (labelled or not) in a Prometheus text exposition; a name with no
// series sums to 0.
func ParseMetricSums(body []byte, names ...string) ([]float64, error) {
	out := make([]float64, len(names))
	err := eachSample(body, names, true, func(i int, v float64) { out[i] += v })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// eachSample calls f for every sample line of a text exposition whose
// series, or only its name when byName (ParseMetricSums), is names[i].
func eachSample(body []byte, names []string, byName bool, f func(i int, v float64)) error {
	return ScanSamples(body, func(series, value string) error {
		if byName {
			series, _, _ = strings.Cut(series, "{")
		}
		for i, n := range names {
			if n != series {
				continue
			}
			v, err := SampleValue(value)
			if err != nil {
				return fmt.Errorf("metric %s: %w", n, err)
			}
			f(i, v)
		}
		return nil
	})
}

// ScanSamples calls f with the series (name and labels) and the rest of
// every sample line of a Prometheus text exposition, comments and blank
// lines left out: the one scanner every reader of /metrics here uses. An
// error of f stops the scan.
func ScanSamples(body []byte, f func(series, rest string) error) error {
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		series, rest, ok := cutSeries(line)
		if !ok {
			continue
		}
		if err := f(series, rest); err != nil {
			return err
		}
	}
	return sc.Err()
}

// SampleValue is the value of a sample line's rest, which a timestamp may
// follow.
func SampleValue(rest string) (float64, error) {
	value, _, _ := strings.Cut(strings.TrimSpace(rest), " ")
	return strconv.ParseFloat(value, 64)
}

// cutSeries splits a sample line into its series (name and labels, whose
// values may hold spaces) and the rest.
func cutSeries(line string) (series, rest string, ok bool) {
	if i := strings.LastIndexByte(line, '}'); i >= 0 && strings.IndexByte(line, '{') >= 0 {
		return line[:i+1], line[i+1:], true
	}
	return strings.Cut(line, " ")
}

// CPUSeconds is the server's utime + stime, from /proc/<pid>/stat: cheap,
// and it costs the server nothing.
func (p *Process) CPUSeconds() (float64, error) { return ProcCPUSeconds(p.PID) }

// RSSBytes is the server's resident set now (VmRSS).
func (p *Process) RSSBytes() (uint64, error) { return procStatusBytes(p.PID, "VmRSS") }

// PeakRSSBytes is the server's peak resident set (VmHWM).
func (p *Process) PeakRSSBytes() (uint64, error) { return procStatusBytes(p.PID, "VmHWM") }

// ProcCPUSeconds is utime + stime of the process, from /proc/<pid>/stat.
func ProcCPUSeconds(pid int) (float64, error) {
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

// procStatusBytes is a "<field>: N kB" line of /proc/<pid>/status, in bytes.
func procStatusBytes(pid int, field string) (uint64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return parseStatusBytes(data, field)
}

func parseStatusBytes(data []byte, field string) (uint64, error) {
	for line := range strings.SplitSeq(string(data), "\n") {
		rest, ok := strings.CutPrefix(line, field+":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("unexpected %s line %q", field, line)
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, err
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("no %s in /proc status", field)
}
