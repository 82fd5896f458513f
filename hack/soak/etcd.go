package main

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"

	"github.com/watchkeeper/watchkeeper/internal/etcdlaunch"
	"github.com/watchkeeper/watchkeeper/internal/etcdproc"
	"github.com/watchkeeper/watchkeeper/internal/netfault"
)

// etcdCommand is the argument that turns this program into one etcd
// member (etcdproc.Main): every member is a child process of the soak, so
// a kill is a real SIGKILL and a member's crash ends that member only.
const etcdCommand = "etcd"

// etcdEnv is the soak's etcd: one member, or a cluster, each member a
// child process on fixed ports (a restart brings it back on the same ports
// and data), with its data in dir/etcd-<i>/data and its log in
// dir/etcd-<i>/etcd.log. Members reach each other only through peer
// proxies (netfault), one in front of each member's peer listener, which
// tell the connections apart by the member that dialed them: cutting
// member i from the others is peers[i] cut for everyone and every other
// proxy cut for connections member i dialed.
type etcdEnv struct {
	cluster *etcdproc.Cluster
	// classifying is cluster, for the peer proxies' goroutines: set once
	// the cluster is made, before any member starts.
	classifying atomic.Pointer[etcdproc.Cluster]
	peers       []*netfault.Proxy
	// crashes counts members' exits the soak did not ask for; each is
	// started again.
	crashes atomic.Int64
}

func startEtcdEnv(dir string, members int) (_ *etcdEnv, err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	e := &etcdEnv{}
	defer func() {
		if err != nil {
			e.stop()
		}
	}()
	specs := make([]etcdproc.Spec, members)
	for i := range specs {
		mdir := filepath.Join(dir, fmt.Sprintf("etcd-%d", i))
		if err := os.MkdirAll(mdir, 0o700); err != nil {
			return nil, err
		}
		specs[i] = etcdproc.Spec{
			Name:    fmt.Sprintf("soak-%d", i),
			Dir:     filepath.Join(mdir, "data"),
			LogPath: filepath.Join(mdir, "etcd.log"),
			// Progress notifications keep a quiet watch current, as in the
			// sample apiserver's own embedded etcd.
			ProgressNotifyInterval: etcdlaunch.ProgressNotifyInterval,
			// The machine stays up: the page cache keeps what fsync would
			// make durable even through a SIGKILL, and the soak is about
			// the cache.
			NoFsync: true,
		}
	}
	e.cluster, err = etcdproc.NewCluster([]string{self, etcdCommand}, specs, func(i int, peerURL string) (string, error) {
		u, err := url.Parse(peerURL)
		if err != nil {
			return "", err
		}
		p, err := netfault.New(netfault.Config{Target: u.Host, Classify: e.dialer, Seed: uint64(1000 + i)})
		if err != nil {
			return "", err
		}
		e.peers = append(e.peers, p)
		return "http://" + p.Addr(), nil
	})
	if err != nil {
		return nil, err
	}
	e.classifying.Store(e.cluster)
	for _, m := range e.cluster.Members {
		m.OnExit = func(m *etcdproc.Member, exit error) {
			e.crashes.Add(1)
			logf("etcd member %s exited on its own (%v); starting it again", m.Spec.Name, exit)
			if err := m.Start(); err != nil {
				logf("etcd member %s: %v", m.Spec.Name, err)
			}
		}
	}
	return e, e.cluster.StartAll()
}

// dialer names the member whose process dialed c, "etcd-<i>", or "".
func (e *etcdEnv) dialer(c net.Conn) string {
	cluster := e.classifying.Load()
	if cluster == nil {
		return ""
	}
	pid, err := netfault.OwnerPID(c, cluster.PIDs())
	if err != nil {
		return ""
	}
	return memberSource(cluster.Index(pid))
}

func memberSource(i int) string { return "etcd-" + strconv.Itoa(i) }

// isolate cuts member i from every other member (blackhole: connections
// stay open and go silent), or heals what isolate did when f is healthy.
func (e *etcdEnv) isolate(i int, f netfault.Fault) {
	for j, p := range e.peers {
		if j == i {
			p.Set(f)
		} else {
			p.SetFrom(memberSource(i), f)
		}
	}
}

// healPeers heals every peer link.
func (e *etcdEnv) healPeers() {
	for _, p := range e.peers {
		p.Heal()
	}
}

func (e *etcdEnv) members() []*etcdproc.Member { return e.cluster.Members }

// endpoints are the members' client URLs, direct: the soak's own clients
// (the checker's record, the compactions) are no part of the faults.
func (e *etcdEnv) endpoints() []string { return e.cluster.Endpoints() }

func (e *etcdEnv) stop() {
	if e.cluster != nil {
		e.cluster.Stop()
	}
	for _, p := range e.peers {
		p.Close()
	}
}

// startAll starts every member that is stopped.
func (e *etcdEnv) startAll() error { return e.cluster.StartAll() }

// etcdLinks are one replica's ways to etcd: a proxy to each member's
// client port, so the replica can be cut from etcd or slowed while the
// others are not.
type etcdLinks []*netfault.Proxy

func newEtcdLinks(e *etcdEnv, replica int) (etcdLinks, error) {
	var ls etcdLinks
	for i, ep := range e.endpoints() {
		u, err := url.Parse(ep)
		if err != nil {
			return nil, err
		}
		p, err := netfault.New(netfault.Config{Target: u.Host, Seed: uint64(100*replica + i + 1)})
		if err != nil {
			ls.close()
			return nil, err
		}
		ls = append(ls, p)
	}
	return ls, nil
}

func (ls etcdLinks) endpoints() []string {
	out := make([]string, len(ls))
	for i, p := range ls {
		out[i] = "http://" + p.Addr()
	}
	return out
}

func (ls etcdLinks) set(f netfault.Fault) {
	for _, p := range ls {
		p.Set(f)
	}
}

func (ls etcdLinks) close() {
	for _, p := range ls {
		p.Close()
	}
}
