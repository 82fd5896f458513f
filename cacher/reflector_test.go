package cacher

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"

	"google.golang.org/grpc/metadata"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Each cache's etcd watch and its progress requests share one gRPC stream
// of their own (etcd picks a stream by the request's metadata): not another
// resource's, whose lagging watch would keep etcd from answering, and not
// its backfill's, which starts behind.
func TestEachResourceWatchesOnItsOwnStream(t *testing.T) {
	streams := map[string]string{}
	for _, resource := range []string{"pods", "widgets"} {
		t.Run(resource, func(t *testing.T) { // each subtest owns its cacher
			fs := cachertest.NewFakeStorage(100)
			c := newTestCacher(t, fs, func(cfg *Config) { cfg.GroupResource = schema.GroupResource{Resource: resource} })
			c.waitReady(t)
			fs.WaitWatch(t, 1)
			c.feed.progress.request()
			cachertest.Poll(t, "a progress request", func() bool { return fs.ProgressCount() >= 1 })
			fs.Mu.Lock()
			watchMD, progressMD := mdString(fs.WatchMD[0]), mdString(fs.ProgressMD[0])
			fs.Mu.Unlock()
			if watchMD != progressMD {
				t.Errorf("%s: progress requests carry %s, the watch %s: etcd would answer on another stream", resource, progressMD, watchMD)
			}
			for other, md := range streams {
				if md == watchMD {
					t.Errorf("%s and %s watch on one stream (%s)", resource, other, md)
				}
			}
			streams[resource] = watchMD

			// A resume from before the list backfills on a stream of its own.
			fs.SetList(90)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				_ = c.backfill(ctx, 90)
			}()
			fs.WaitWatch(t, 2)
			fs.Mu.Lock()
			backfillMD := mdString(fs.WatchMD[1])
			fs.Mu.Unlock()
			if backfillMD == watchMD {
				t.Errorf("%s: the backfill watches on the cache's stream (%s)", resource, watchMD)
			}
		})
	}
}

// mdString is gRPC metadata in a stable order with its values: MD's own
// String redacts them since grpc-go 1.84, which would make every stream
// look alike.
func mdString(md metadata.MD) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(md)) {
		fmt.Fprintf(&b, "%s=%q;", k, md[k])
	}
	return b.String()
}
