package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"
)

// embeddedEtcdReadyTimeout bounds how long start-up waits for the member.
const embeddedEtcdReadyTimeout = time.Minute

// etcdPorts are the member's loopback ports, kept in the data directory so a
// restarted member comes back where its peers (itself) recorded it.
type etcdPorts struct {
	Client int `json:"client"`
	Peer   int `json:"peer"`
}

// startEmbeddedEtcd runs a single-member etcd whose data lives in dir and
// survives restarts. It returns the member and its client URL.
func startEmbeddedEtcd(dir string) (*embed.Etcd, string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", fmt.Errorf("creating the etcd data directory: %w", err)
	}
	ports, err := loadOrPickPorts(filepath.Join(dir, "ports.json"))
	if err != nil {
		return nil, "", err
	}
	clientURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports.Client))}
	peerURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports.Peer))}

	cfg := embed.NewConfig()
	cfg.Name = "watchkeeper"
	cfg.Dir = filepath.Join(dir, "data")
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	// Progress notifications keep a quiet resource's cache current.
	cfg.WatchProgressNotifyInterval = 5 * time.Second
	zapCfg := zap.NewProductionConfig()
	zapCfg.Level = zap.NewAtomicLevelAt(zapcore.WarnLevel)
	logger, err := zapCfg.Build()
	if err != nil {
		return nil, "", err
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(logger.Named("etcd"))

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("starting embedded etcd in %s: %w", dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(embeddedEtcdReadyTimeout):
		e.Close()
		return nil, "", fmt.Errorf("embedded etcd not ready after %v", embeddedEtcdReadyTimeout)
	}
	klog.InfoS("Embedded etcd ready", "dataDir", cfg.Dir, "client", clientURL.String())
	return e, clientURL.String(), nil
}

func loadOrPickPorts(path string) (etcdPorts, error) {
	var p etcdPorts
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := json.Unmarshal(data, &p); err != nil {
			return p, fmt.Errorf("reading %s: %w", path, err)
		}
		if portFree(p.Client) && portFree(p.Peer) {
			return p, nil
		}
		klog.InfoS("Embedded etcd's recorded ports are taken; picking new ones", "ports", p)
	case !errors.Is(err, os.ErrNotExist):
		return p, err
	}
	if p.Client, err = freePort(); err != nil {
		return p, err
	}
	if p.Peer, err = freePort(); err != nil {
		return p, err
	}
	data, _ = json.Marshal(p)
	return p, os.WriteFile(path, data, 0o600)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}
