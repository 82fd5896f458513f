package storagebench

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/watchkeeper/watchkeeper/internal/etcdtest"
)

// TestMain lets this test binary be the exactkey scenario's writer process
// too (Env.Self), as the bench binary is in a real run.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == WriterCommand {
		if err := WriterMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The exactkey scenario end to end against an etcd, for both caches and for
// the floor without one (None), at a small size: its writer process makes
// five rounds of the writes, and every watcher gets exactly its object's
// events from each round, no more; the five unwatched rounds between them
// reach no watcher.
func TestExactKeyAgainstEtcd(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	e := etcdtest.Start(t)
	const watchers, objects, writes = 30, 10, 20
	for _, decorator := range []string{Watchkeeper, Upstream, None} {
		t.Run(decorator, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			env := Env{EtcdEndpoint: e.Endpoints()[0], Prefix: "/exactkey-test/" + decorator, Self: self}
			rs, err := ExactKey(ctx, env, decorator, watchers, objects, writes)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]float64{}
			for _, r := range rs {
				got[r.Metric] = r.Value
			}
			// Three watchers on each object: each write is owed to three.
			want := map[string]float64{
				"rounds": exactKeyRounds, "unwatched_rounds": exactKeyRounds, "events_expected": exactKeyRounds * 3 * writes,
				"events_missing": 0, "events_extra": 0, "watchers_closed": 0,
			}
			for m, v := range want {
				if g, ok := got[m]; !ok || g != v {
					t.Errorf("%s = %v (reported: %v), want %v", m, g, ok, v)
				}
			}
			for _, m := range []string{"cpu_ms_per_write", "cpu_ms_per_write_first", "cpu_ms_per_write_max", "cpu_ms_per_write_unwatched", "write_seconds", "latency_p99_ms",
				"allocs_per_write", "allocs_per_write_unwatched"} {
				if got[m] <= 0 {
					t.Errorf("%s = %v, want > 0", m, got[m])
				}
			}
			t.Logf("allocs per write %v, unwatched %v; CPU per write %v ms", got["allocs_per_write"], got["allocs_per_write_unwatched"], got["cpu_ms_per_write"])
			// Three deliveries a write: reported. The difference of two
			// medians of a few ms may have any sign.
			if _, ok := got["cpu_us_per_delivery"]; !ok {
				t.Error("cpu_us_per_delivery not reported")
			}
		})
	}
}
