package storagebench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/watchkeeper/watchkeeper/internal/childserver"
)

// etcdCounters are the etcd server's own counters that tell what serving the
// caches costs it, from its Prometheus exposition (/metrics on its client
// URL). They are the whole server's: a delta over a window counts every
// client's work in it, which in a bench run is the one run's (runs are one at
// a time, each in its own process).
type etcdCounters struct {
	// mvccRanges is etcd_mvcc_range_total: every range of the MVCC store,
	// whoever asked. That is each Range RPC, each read of a transaction's
	// compare, and each previous value a watch with PrevKV needs: etcd's
	// watch stream ranges the store once for every update and delete event
	// it sends to such a watch (v3rpc's sendLoop), which is the work the
	// gate WatchFromStorageWithoutPrevKV takes away.
	mvccRanges float64
	// rangeRPCs are the Range and RangeStream requests clients made of the
	// KV service (grpc_server_handled_total, whatever their code).
	rangeRPCs float64
	// sentBytes is etcd_network_client_grpc_sent_bytes_total: the bytes of
	// the gRPC messages the server sent to all its clients, before HTTP/2
	// framing.
	sentBytes float64
}

func (c etcdCounters) plus(o etcdCounters) etcdCounters {
	return etcdCounters{mvccRanges: c.mvccRanges + o.mvccRanges, rangeRPCs: c.rangeRPCs + o.rangeRPCs, sentBytes: c.sentBytes + o.sentBytes}
}

func (c etcdCounters) minus(o etcdCounters) etcdCounters {
	return etcdCounters{mvccRanges: c.mvccRanges - o.mvccRanges, rangeRPCs: c.rangeRPCs - o.rangeRPCs, sentBytes: c.sentBytes - o.sentBytes}
}

// scrapeEtcd reads the counters from the etcd at endpoint (its client URL).
func scrapeEtcd(ctx context.Context, endpoint string) (etcdCounters, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(endpoint, "/")+"/metrics", nil)
	if err != nil {
		return etcdCounters{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return etcdCounters{}, fmt.Errorf("scraping etcd's /metrics: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return etcdCounters{}, fmt.Errorf("scraping etcd's /metrics: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return etcdCounters{}, fmt.Errorf("scraping etcd's /metrics: status %d", resp.StatusCode)
	}
	return parseEtcdCounters(body)
}

// parseEtcdCounters reads the counters from a text exposition; a counter
// with no series is an error (an etcd that names them otherwise).
func parseEtcdCounters(body []byte) (etcdCounters, error) {
	var c etcdCounters
	var found [3]bool
	err := childserver.ScanSamples(body, func(series, rest string) error {
		name, labels, value, ok := sampleOf(series, rest)
		if !ok {
			return nil
		}
		switch {
		case name == "etcd_mvcc_range_total":
			c.mvccRanges += value
			found[0] = true
		case name == "grpc_server_handled_total" && labels["grpc_service"] == "etcdserverpb.KV" &&
			(labels["grpc_method"] == "Range" || labels["grpc_method"] == "RangeStream"):
			c.rangeRPCs += value
			found[1] = true
		case name == "etcd_network_client_grpc_sent_bytes_total":
			c.sentBytes += value
			found[2] = true
		}
		return nil
	})
	if err != nil {
		return c, err
	}
	for i, name := range []string{"etcd_mvcc_range_total", "grpc_server_handled_total of KV Range", "etcd_network_client_grpc_sent_bytes_total"} {
		if !found[i] {
			return c, fmt.Errorf("etcd's /metrics has no %s", name)
		}
	}
	return c, nil
}

// parseSample splits a sample line, `name{k="v",...} value [timestamp]`,
// into its parts, with the scanner every /metrics reader here uses.
func parseSample(line string) (name string, labels map[string]string, value float64, ok bool) {
	_ = childserver.ScanSamples([]byte(line), func(series, rest string) error {
		name, labels, value, ok = sampleOf(series, rest)
		return nil
	})
	return name, labels, value, ok
}

// sampleOf is a sample's name, labels and value from its series and the
// rest of its line. Label values with escaped quotes or commas are not
// needed for etcd's counters and are read as far as the text allows.
func sampleOf(series, rest string) (name string, labels map[string]string, value float64, ok bool) {
	name, labelText, hasLabels := strings.Cut(series, "{")
	if hasLabels {
		end := strings.LastIndexByte(labelText, '}')
		if end < 0 {
			return "", nil, 0, false
		}
		labels = map[string]string{}
		for _, kv := range strings.Split(labelText[:end], ",") {
			k, v, found := strings.Cut(kv, "=")
			if !found {
				continue
			}
			labels[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), `"`)
		}
	}
	v, err := childserver.SampleValue(rest)
	if err != nil {
		return "", nil, 0, false
	}
	return name, labels, v, true
}
