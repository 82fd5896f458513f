package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/klog/v2"

	"github.com/watchkeeper/watchkeeper/internal/etcdlaunch"
	"github.com/watchkeeper/watchkeeper/internal/freeport"
)

// etcdPorts are the member's loopback ports, kept in the data directory so a
// restarted member comes back where its peers (itself) recorded it.
type etcdPorts struct {
	Client int `json:"client"`
	Peer   int `json:"peer"`
}

// embeddedEtcd is the standalone server's etcd member.
type embeddedEtcd struct{ *etcdlaunch.Member }

// Stop stops the member after the server (Run stops it last) and says so in
// one line: a clean stop is quiet (etcdlaunch drops the errors etcd logs
// about its own listeners closing), so anything else etcd logs is news.
func (e embeddedEtcd) Stop() {
	e.Member.Stop()
	klog.InfoS("Embedded etcd stopped", "dataDir", e.Dir())
}

// startEmbeddedEtcd runs a single-member etcd whose data lives in dir and
// survives restarts (fsync on: this is the server's only copy).
func startEmbeddedEtcd(dir string) (embeddedEtcd, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return embeddedEtcd{}, fmt.Errorf("creating the etcd data directory: %w", err)
	}
	ports, err := loadOrPickPorts(filepath.Join(dir, "ports.json"))
	if err != nil {
		return embeddedEtcd{}, err
	}
	e, err := etcdlaunch.Start(etcdlaunch.Config{
		Name:       "watchkeeper",
		Dir:        filepath.Join(dir, "data"),
		ClientPort: ports.Client,
		PeerPort:   ports.Peer,
		// Progress notifications keep a quiet resource's cache current.
		ProgressNotifyInterval: etcdlaunch.ProgressNotifyInterval,
	})
	if err != nil {
		return embeddedEtcd{}, err
	}
	klog.InfoS("Embedded etcd ready", "dataDir", e.Dir(), "client", e.Endpoint())
	return embeddedEtcd{e}, nil
}

func loadOrPickPorts(path string) (etcdPorts, error) {
	var p etcdPorts
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := json.Unmarshal(data, &p); err != nil {
			return p, fmt.Errorf("reading %s: %w", path, err)
		}
		if freeport.Free(p.Client) && freeport.Free(p.Peer) {
			return p, nil
		}
		klog.InfoS("Embedded etcd's recorded ports are taken; picking new ones", "ports", p)
	case !errors.Is(err, os.ErrNotExist):
		return p, err
	}
	ports, err := freeport.Ports(2)
	if err != nil {
		return p, err
	}
	p.Client, p.Peer = ports[0], ports[1]
	data, _ = json.Marshal(p)
	return p, os.WriteFile(path, data, 0o600)
}
