package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/watchkeeper/watchkeeper/internal/etcdlaunch"
)

const (
	// etcdProgressNotifyInterval keeps the caches' resourceVersion moving on
	// an idle resource; upstream only sends bookmarks when it moves.
	etcdProgressNotifyInterval = time.Second
	// etcdQuota is far above what the largest run writes.
	etcdQuota = 8 << 30
	// etcdReadyLine is what the child prints on stdout once it serves.
	etcdReadyLine = "etcd ready"
)

// etcdMain runs a single-member etcd until SIGTERM/SIGINT or until the parent
// goes away.
func etcdMain(args []string) error {
	fs := flag.NewFlagSet("etcd", flag.ExitOnError)
	dir := fs.String("dir", "", "data directory")
	clientPort := fs.Int("client-port", 0, "loopback client port (0: a free one)")
	peerPort := fs.Int("peer-port", 0, "loopback peer port (0: a free one)")
	watchParent := fs.Bool("exit-on-stdin-eof", false, "exit when stdin closes (set by the parent)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *watchParent {
		exitWhenParentGone()
	}
	e, err := etcdlaunch.Start(etcdlaunch.Config{
		Name:                   "bench",
		Dir:                    *dir,
		ClientPort:             *clientPort,
		PeerPort:               *peerPort,
		ProgressNotifyInterval: etcdProgressNotifyInterval,
		QuotaBackendBytes:      etcdQuota,
		// The data is thrown away after the run; fsync would only add disk
		// latency noise to write-to-receipt figures.
		NoFsync: true,
	})
	if err != nil {
		return err
	}
	defer e.Stop()
	fmt.Println(etcdReadyLine)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sig:
	case err := <-e.Err():
		return fmt.Errorf("etcd: %w", err)
	}
	return nil
}
