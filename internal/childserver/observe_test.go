package childserver

import "testing"

func TestParseMetrics(t *testing.T) {
	body := []byte(`# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 110
go_memstats_heap_alloc_bytes 8.272544e+06
go_memstats_heap_alloc_bytes_total 1
apiserver_request_total{verb="GET"} 3
go_memstats_stack_inuse_bytes 1.081344e+06 1700000000000
`)
	got, err := ParseMetrics(body, "go_memstats_heap_alloc_bytes", "go_memstats_stack_inuse_bytes", "go_goroutines")
	if err != nil {
		t.Fatal(err)
	}
	if want := []float64{8272544, 1081344, 110}; got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("got %v, want %v", got, want)
	}
	if _, err := ParseMetrics(body, "go_threads"); err == nil {
		t.Error("a missing metric is not an error")
	}
}

func TestParseMetricSums(t *testing.T) {
	body := []byte(`# TYPE apiserver_terminated_watchers_total counter
apiserver_terminated_watchers_total{group="demo",resource="widgets"} 3
apiserver_terminated_watchers_total{group="demo",resource="gadgets x"} 2 1700000000000
apiserver_terminated_watchers_total_other 7
go_goroutines 110
`)
	got, err := ParseMetricSums(body, "apiserver_terminated_watchers_total", "go_goroutines", "apiserver_watch_cache_initializations_total")
	if err != nil {
		t.Fatal(err)
	}
	if want := []float64{5, 110, 0}; got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestParseProc(t *testing.T) {
	// A command name with spaces and a parenthesis, as the kernel allows.
	stat := []byte("1234 (odd) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 12 0 5 1000 200\n")
	cpu, err := parseProcStatCPU(stat)
	if err != nil || cpu != 3 {
		t.Errorf("parseProcStatCPU = %v, %v; want 3s (250+50 ticks)", cpu, err)
	}
	status := []byte("Name:\tx\nVmHWM:\t   4096 kB\nVmRSS:\t   2048 kB\nThreads:\t3\n")
	rss, err := parseStatusBytes(status, "VmRSS")
	if err != nil || rss != 2048*1024 {
		t.Errorf("VmRSS = %v, %v", rss, err)
	}
	peak, err := parseStatusBytes(status, "VmHWM")
	if err != nil || peak != 4096*1024 {
		t.Errorf("VmHWM = %v, %v", peak, err)
	}
	if _, err := parseStatusBytes(status, "VmSwap"); err == nil {
		t.Error("a missing field is not an error")
	}
}
