package storagebench

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// The counters are read from etcd's exposition as it writes them: the MVCC
// ranges, the KV service's Range and RangeStream requests of every code (no
// other method's, no other service's), and the sent bytes.
func TestParseEtcdCounters(t *testing.T) {
	body := `# HELP etcd_mvcc_range_total Total number of ranges seen by this member.
# TYPE etcd_mvcc_range_total counter
etcd_mvcc_range_total 1234
etcd_mvcc_put_total 99
etcd_network_client_grpc_sent_bytes_total 5.5e+06
etcd_network_client_grpc_received_bytes_total 777
grpc_server_handled_total{grpc_code="OK",grpc_method="Range",grpc_service="etcdserverpb.KV",grpc_type="unary"} 40
grpc_server_handled_total{grpc_code="Unavailable",grpc_method="Range",grpc_service="etcdserverpb.KV",grpc_type="unary"} 2
grpc_server_handled_total{grpc_code="OK",grpc_method="RangeStream",grpc_service="etcdserverpb.KV",grpc_type="server_stream"} 1
grpc_server_handled_total{grpc_code="OK",grpc_method="DeleteRange",grpc_service="etcdserverpb.KV",grpc_type="unary"} 500
grpc_server_handled_total{grpc_code="OK",grpc_method="Range",grpc_service="other.KV",grpc_type="unary"} 300
grpc_server_started_total{grpc_method="Range",grpc_service="etcdserverpb.KV",grpc_type="unary"} 43
`
	c, err := parseEtcdCounters([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if want := (etcdCounters{mvccRanges: 1234, rangeRPCs: 43, sentBytes: 5.5e6}); c != want {
		t.Errorf("parseEtcdCounters = %+v, want %+v", c, want)
	}
	for _, missing := range []string{"etcd_mvcc_range_total", "grpc_server_handled_total", "etcd_network_client_grpc_sent_bytes_total"} {
		var kept []string
		for _, l := range strings.Split(body, "\n") {
			if !strings.HasPrefix(l, missing) {
				kept = append(kept, l)
			}
		}
		if _, err := parseEtcdCounters([]byte(strings.Join(kept, "\n"))); err == nil {
			t.Errorf("no %s, and no error", missing)
		}
	}
}

// A span's counts are the later sample minus the earlier, and the phases'
// spans add up to the whole.
func TestPrevKVSampleArithmetic(t *testing.T) {
	a := prevKVSample{etcd: etcdCounters{mvccRanges: 10, rangeRPCs: 3, sentBytes: 1000}, received: 500, sent: 50}
	b := prevKVSample{etcd: etcdCounters{mvccRanges: 25, rangeRPCs: 4, sentBytes: 4000}, received: 2500, sent: 80}
	c := prevKVSample{etcd: etcdCounters{mvccRanges: 26, rangeRPCs: 9, sentBytes: 4100}, received: 2600, sent: 81}
	ab, bc := b.minus(a), c.minus(b)
	if want := (prevKVSample{etcd: etcdCounters{mvccRanges: 15, rangeRPCs: 1, sentBytes: 3000}, received: 2000, sent: 30}); ab != want {
		t.Errorf("b - a = %+v, want %+v", ab, want)
	}
	if got, want := ab.plus(bc), c.minus(a); got != want {
		t.Errorf("(b - a) + (c - b) = %+v, want c - a = %+v", got, want)
	}
}

func TestParseSample(t *testing.T) {
	for _, tc := range []struct {
		line, name string
		labels     map[string]string
		value      float64
		ok         bool
	}{
		{line: "a_total 3", name: "a_total", value: 3, ok: true},
		{line: `b{x="1",y="two"} 4.5 1700000000`, name: "b", labels: map[string]string{"x": "1", "y": "two"}, value: 4.5, ok: true},
		{line: `c{} 1`, name: "c", labels: map[string]string{}, value: 1, ok: true},
		{line: "d", ok: false},
		{line: "e notanumber", ok: false},
		{line: `f{x="1" 2`, ok: false},
	} {
		name, labels, value, ok := parseSample(tc.line)
		if ok != tc.ok || (ok && (name != tc.name || value != tc.value || len(labels) != len(tc.labels))) {
			t.Errorf("parseSample(%q) = %q %v %v %v, want %q %v %v %v", tc.line, name, labels, value, ok, tc.name, tc.labels, tc.value, tc.ok)
			continue
		}
		for k, v := range tc.labels {
			if labels[k] != v {
				t.Errorf("parseSample(%q): label %s = %q, want %q", tc.line, k, labels[k], v)
			}
		}
	}
}

// The proxy forwards both ways and counts each way on its own: what the
// target sent is what the client received.
func TestCountingProxyCountsEachWay(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const request, answer = 1000, 300_000
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if _, err := io.ReadFull(c, make([]byte, request)); err != nil {
			return
		}
		_, _ = c.Write(bytes.Repeat([]byte("x"), answer))
	}()
	p, err := startCountingProxy(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	host, err := hostOf(p.url())
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(bytes.Repeat([]byte("q"), request)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != answer {
		t.Fatalf("client got %d bytes, want %d", len(got), answer)
	}
	if p.received() != answer || p.sent() != request {
		t.Errorf("proxy counted %d from the target and %d to it, want %d and %d", p.received(), p.sent(), answer, request)
	}
	if _, err := hostOf("127.0.0.1:2379"); err == nil {
		t.Error("hostOf of an address with no scheme: no error")
	}
}
