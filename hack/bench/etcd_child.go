package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
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
	clientURL := fs.String("client-url", "", "client URL, e.g. http://127.0.0.1:2379")
	peerURL := fs.String("peer-url", "", "peer URL")
	watchParent := fs.Bool("exit-on-stdin-eof", false, "exit when stdin closes (set by the parent)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *watchParent {
		exitWhenParentGone()
	}
	cu, err := url.Parse(*clientURL)
	if err != nil {
		return fmt.Errorf("--client-url: %w", err)
	}
	pu, err := url.Parse(*peerURL)
	if err != nil {
		return fmt.Errorf("--peer-url: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Name = "bench"
	cfg.Dir = *dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.WatchProgressNotifyInterval = etcdProgressNotifyInterval
	cfg.QuotaBackendBytes = etcdQuota
	// The data is thrown away after the run; fsync would only add disk
	// latency noise to write-to-receipt figures.
	cfg.UnsafeNoFsync = true
	logger, err := zap.NewProductionConfig().Build(zap.IncreaseLevel(zapcore.WarnLevel))
	if err != nil {
		return err
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(logger.Named("etcd"))

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("starting etcd: %w", err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(time.Minute):
		return fmt.Errorf("etcd not ready after a minute")
	}
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
