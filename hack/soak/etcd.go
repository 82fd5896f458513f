package main

import (
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
