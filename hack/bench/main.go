// Command bench compares watchkeeper's watch cache with upstream's cacher
// (k8s.io/apiserver's registry.StorageWithCacher) on the same scenarios, in
// one run, and writes the results, a markdown table and charts to
// _output/bench (a run's output; docs/performance.md keeps its figures).
//
//	go run ./hack/bench            # full sizes
//	go run ./hack/bench -quick     # small sizes, a few minutes
//	go run ./hack/bench -scenarios idle,fanout -levels storage
//
// The same binary plays three parts, so measurements stay isolated:
//
//	bench [flags]       the parent: plans the runs, collects, reports
//	bench etcd ...      etcd, in its own process so its CPU is not counted
//	bench run ...       one (scenario, level, decorator, size) in a fresh
//	                    process; prints result JSON lines on stdout
//	bench writer ...    a run's writes, in their own process so their CPU
//	                    is not counted (started by bench run)
package main

import (
	"fmt"
	"os"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/storagebench"
)

func main() {
	var err error
	switch {
	case len(os.Args) > 1 && os.Args[1] == "etcd":
		err = etcdMain(os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "run":
		err = runMain(os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == storagebench.WriterCommand:
		err = storagebench.WriterMain(os.Args[2:])
	default:
		err = parentMain(os.Args[1:])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}
