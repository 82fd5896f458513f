package main

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

const etcdStartTimeout = time.Minute

// etcdMember is one embedded etcd member that can be stopped and started
// again on the same ports and data, as a restart in production would.
type etcdMember struct {
	cfg *embed.Config

	mu      sync.Mutex
	running *embed.Etcd
}

func newEtcdMember(dir string) (*etcdMember, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	clientURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))}
	peerURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))}
	cfg := embed.NewConfig()
	cfg.Name = "soak"
	cfg.Dir = filepath.Join(dir, "data")
	// Restarts are graceful and the machine stays up: the page cache keeps
	// what fsync would make durable, and the soak is about the cache.
	cfg.UnsafeNoFsync = true
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	// Progress notifications keep a quiet watch current, as in the sample
	// apiserver's own embedded etcd.
	cfg.WatchProgressNotifyInterval = 5 * time.Second
	logFile := filepath.Join(dir, "etcd.log")
	zapCfg := zap.NewProductionConfig()
	zapCfg.Level = zap.NewAtomicLevelAt(zapcore.WarnLevel)
	zapCfg.OutputPaths = []string{logFile}
	zapCfg.ErrorOutputPaths = []string{logFile}
	logger, err := zapCfg.Build()
	if err != nil {
		return nil, err
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(logger.Named("etcd"))
	return &etcdMember{cfg: cfg}, nil
}

func (e *etcdMember) endpoint() string { return e.cfg.AdvertiseClientUrls[0].String() }

func (e *etcdMember) start() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.running != nil {
		return nil
	}
	// On a restart the data directory already names the cluster.
	srv, err := embed.StartEtcd(e.cfg)
	if err != nil {
		return fmt.Errorf("starting embedded etcd: %w", err)
	}
	select {
	case <-srv.Server.ReadyNotify():
	case <-time.After(etcdStartTimeout):
		srv.Close()
		return fmt.Errorf("embedded etcd not ready after %v", etcdStartTimeout)
	}
	e.running = srv
	return nil
}

func (e *etcdMember) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.running != nil {
		e.running.Close()
		e.running = nil
	}
}

func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
