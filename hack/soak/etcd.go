package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/watchkeeper/watchkeeper/internal/etcdlaunch"
)

// startEtcd runs the soak's etcd member on free loopback ports, its data in
// dir/data and its log in dir/etcd.log. The member can be stopped and
// started again on the same ports and data, as a restart in production
// would.
func startEtcd(dir string) (*etcdlaunch.Member, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	logger, err := etcdlaunch.NewLogger(filepath.Join(dir, "etcd.log"))
	if err != nil {
		return nil, err
	}
	return etcdlaunch.Start(etcdlaunch.Config{
		Name:   "soak",
		Dir:    filepath.Join(dir, "data"),
		Logger: logger,
		// Progress notifications keep a quiet watch current, as in the
		// sample apiserver's own embedded etcd.
		ProgressNotifyInterval: etcdlaunch.ProgressNotifyInterval,
		// Restarts are graceful and the machine stays up: the page cache
		// keeps what fsync would make durable, and the soak is about the
		// cache.
		NoFsync: true,
	})
}

// startEtcdCluster runs a cluster of n members, member i's data in
// dir/etcd-i/data and its log in dir/etcd-i/etcd.log, configured as the
// single member is.
func startEtcdCluster(dir string, n int) (*etcdlaunch.Cluster, error) {
	cs := make([]etcdlaunch.Config, n)
	for i := range cs {
		mdir := filepath.Join(dir, fmt.Sprintf("etcd-%d", i))
		if err := os.MkdirAll(mdir, 0o700); err != nil {
			return nil, err
		}
		logger, err := etcdlaunch.NewLogger(filepath.Join(mdir, "etcd.log"))
		if err != nil {
			return nil, err
		}
		cs[i] = etcdlaunch.Config{
			Name:                   fmt.Sprintf("soak-%d", i),
			Dir:                    filepath.Join(mdir, "data"),
			Logger:                 logger,
			ProgressNotifyInterval: etcdlaunch.ProgressNotifyInterval,
			NoFsync:                true,
		}
	}
	return etcdlaunch.StartCluster(cs)
}

// etcdEnv is the soak's etcd: one member, or a cluster.
type etcdEnv struct {
	single  *etcdlaunch.Member
	cluster *etcdlaunch.Cluster
}

func startEtcdEnv(dir string, members int) (*etcdEnv, error) {
	if members <= 1 {
		m, err := startEtcd(filepath.Join(dir, "etcd"))
		return &etcdEnv{single: m}, err
	}
	c, err := startEtcdCluster(dir, members)
	return &etcdEnv{cluster: c}, err
}

func (e *etcdEnv) endpoints() []string {
	if e.single != nil {
		return e.single.Endpoints()
	}
	return e.cluster.Endpoints()
}

func (e *etcdEnv) stop() {
	if e.single != nil {
		e.single.Stop()
	} else if e.cluster != nil {
		e.cluster.Stop()
	}
}

// startAll starts every member that is stopped.
func (e *etcdEnv) startAll() error {
	if e.single != nil {
		return e.single.Start()
	}
	var errs []error
	for _, m := range e.cluster.Members {
		if err := m.Start(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
