package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"k8s.io/klog/v2"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/storagebench"
)

// writerMain is `bench writer`: a run's writes, asked for on stdin and
// answered on stdout (storagebench.ServeWrites). It ends when stdin does,
// that is when the run that started it closes the pipe or exits.
func writerMain(args []string) error {
	var env storagebench.Env
	fs := flag.NewFlagSet(storagebench.WriterCommand, flag.ExitOnError)
	fs.StringVar(&env.EtcdEndpoint, "etcd", "", "etcd client URL")
	fs.StringVar(&env.Prefix, "prefix", "", "etcd key prefix of the run")
	klog.InitFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if env.EtcdEndpoint == "" || env.Prefix == "" {
		return fmt.Errorf("writer: --etcd and --prefix are required")
	}
	defer klog.Flush()
	return storagebench.ServeWrites(context.Background(), env, os.Stdin, os.Stdout)
}
