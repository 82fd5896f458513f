// Package etcdlaunch runs real etcd members inside the calling process: the
// one launcher behind the integration tests (through package etcdtest), the
// benchmark's etcd child, the soak and the sample apiserver's standalone
// mode. Every member is configured in one place, config; what callers may
// vary is in Config. Members stop and start again on the same ports and
// data directory, which the fault tests and the soak's restarts need.
//
// It returns errors and never imports "testing", so binaries may use it.
package etcdlaunch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	etcderrors "go.etcd.io/etcd/server/v3/etcdserver/errors"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"

	"github.com/watchkeeper/watchkeeper/internal/freeport"
)

// ReadyTimeout bounds how long Start waits for a member to serve.
const ReadyTimeout = time.Minute

// ProgressNotifyInterval is the interval the sample apiserver and the soak
// run etcd with: progress notifications keep a quiet resource's cache
// current.
const ProgressNotifyInterval = 5 * time.Second

// Config is what differs between the members watchkeeper runs.
type Config struct {
	// Name is the member's name in its cluster.
	Name string
	// Dir is the data directory, created if missing.
	Dir string
	// ClientPort and PeerPort are loopback ports; 0 picks a free one.
	ClientPort, PeerPort int
	// Logger receives etcd's logs (named "etcd"); nil: NewLogger("").
	Logger *zap.Logger
	// ProgressNotifyInterval is etcd's watch progress notify interval;
	// 0 keeps etcd's default (10m).
	ProgressNotifyInterval time.Duration
	// QuotaBackendBytes is the backend quota; 0 keeps etcd's default.
	QuotaBackendBytes int64
	// NoFsync turns fsync off, for members whose data is thrown away or
	// outlives only graceful restarts.
	NoFsync bool

	// For a member of a cluster assembled by the caller, one member per
	// process (package etcdproc), rather than by StartCluster:
	//
	// AdvertisePeerURL is the peer URL the member gives its peers, when
	// they reach it through something else than its listener (a proxy);
	// "" advertises the listener.
	AdvertisePeerURL string
	// InitialCluster is every member's name=advertised peer URL, comma
	// separated, and ClusterToken the cluster's token; "" for a cluster of
	// one. On a restart the data directory names the cluster and etcd
	// ignores both.
	InitialCluster, ClusterToken string
}

// NewLogger is the logger members use unless told otherwise: etcd's
// warnings and errors, as JSON, to path, or to stderr when path is "".
func NewLogger(path string) (*zap.Logger, error) {
	zapCfg := zap.NewProductionConfig()
	zapCfg.Level = zap.NewAtomicLevelAt(zapcore.WarnLevel)
	if path != "" {
		zapCfg.OutputPaths = []string{path}
		zapCfg.ErrorOutputPaths = []string{path}
	}
	return zapCfg.Build()
}

// config is the one etcd configuration of every member. stopping is the
// member's flag that a Stop or Kill is under way (see quietStop).
func (c Config) config(clientPort, peerPort int, stopping *atomic.Bool) (*embed.Config, error) {
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the etcd data directory: %w", err)
	}
	logger := c.Logger
	if logger == nil {
		var err error
		if logger, err = NewLogger(""); err != nil {
			return nil, err
		}
	}
	clientURL := loopbackURL(clientPort)
	peerURL := loopbackURL(peerPort)
	cfg := embed.NewConfig()
	cfg.Name = c.Name
	cfg.Dir = c.Dir
	cfg.UnsafeNoFsync = c.NoFsync
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	if c.AdvertisePeerURL != "" {
		u, err := url.Parse(c.AdvertisePeerURL)
		if err != nil {
			return nil, fmt.Errorf("advertised peer URL: %w", err)
		}
		cfg.AdvertisePeerUrls = []url.URL{*u}
	}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	if c.InitialCluster != "" {
		cfg.InitialCluster = c.InitialCluster
		cfg.InitialClusterToken = c.ClusterToken
		cfg.ClusterState = embed.ClusterStateFlagNew
	}
	if c.ProgressNotifyInterval > 0 {
		cfg.WatchProgressNotifyInterval = c.ProgressNotifyInterval
	}
	if c.QuotaBackendBytes > 0 {
		cfg.QuotaBackendBytes = c.QuotaBackendBytes
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(logger.Named("etcd").WithOptions(
		zap.WrapCore(func(core zapcore.Core) zapcore.Core { return quietStop{core, stopping} })))
	return cfg, nil
}

// quietStop is the core of a member's logger. When a member is stopped, each
// of etcd's listeners and servers ends with a "closed" error, which etcd logs
// as if serving had failed: at error level with a stack trace ("setting up
// serving from embedded etcd failed. ... use of closed network connection")
// and as warnings of its gRPC server. They say only that the stop is under
// way, so while the member's Stop or Kill runs, entries that carry such an
// error are dropped. Every other entry, and the same errors at any other
// time, pass as before.
type quietStop struct {
	zapcore.Core
	stopping *atomic.Bool
}

func (q quietStop) With(fields []zapcore.Field) zapcore.Core {
	return quietStop{q.Core.With(fields), q.stopping}
}

// Check leaves the entry to the wrapped core (and its sampling) unless a stop
// is under way; then q writes it, so Write can look at its fields.
func (q quietStop) Check(ent zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if !q.stopping.Load() {
		return q.Core.Check(ent, ce)
	}
	if q.Enabled(ent.Level) {
		return ce.AddCore(ent, q)
	}
	return ce
}

func (q quietStop) Write(ent zapcore.Entry, fields []zapcore.Field) error {
	if q.stopping.Load() && closedByStop(fields) {
		return nil
	}
	return q.Core.Write(ent, fields)
}

var cmuxClosed = map[string]bool{"mux: server closed": true, "mux: listener closed": true}

// closedByStop reports whether an entry's error is one a listener or server
// returns because it was closed (net.ErrClosed from an accept,
// http.ErrServerClosed, grpc.ErrServerStopped, cmux's ErrServerClosed and
// ErrListenerClosed, matched by text: cmux is etcd's dependency, not ours),
// or etcd's ErrCanceled or context.Canceled for a request of its own that
// the stop cut short (the cluster version update of a member stopped just
// after it started).
func closedByStop(fields []zapcore.Field) bool {
	for _, f := range fields {
		if f.Type != zapcore.ErrorType {
			continue
		}
		err, ok := f.Interface.(error)
		if !ok {
			continue
		}
		if errors.Is(err, net.ErrClosed) || errors.Is(err, http.ErrServerClosed) || errors.Is(err, grpc.ErrServerStopped) ||
			errors.Is(err, etcderrors.ErrCanceled) || errors.Is(err, context.Canceled) || cmuxClosed[err.Error()] {
			return true
		}
	}
	return false
}

func loopbackURL(port int) url.URL {
	return url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
}

// portLock keeps two members of this process from picking the same free
// ports between closing the probe listeners and etcd binding them.
var portLock sync.Mutex

// newMember is a stopped member on the configured ports, free ones where
// they are 0. Call it with portLock held.
func (c Config) newMember() (*Member, error) {
	ports, err := pickPorts(2)
	if err != nil {
		return nil, err
	}
	client, peer := c.ClientPort, c.PeerPort
	if client == 0 {
		client = ports[0]
	}
	if peer == 0 {
		peer = ports[1]
	}
	m := &Member{}
	if m.cfg, err = c.config(client, peer, &m.stopping); err != nil {
		return nil, err
	}
	return m, nil
}

// Member is one embedded etcd member with a data directory that outlives
// Stop, so Start brings the same member back with its data.
type Member struct {
	cfg *embed.Config
	// stopping is set while Stop or Kill closes the running etcd: its
	// logger then drops the errors the closing itself causes.
	stopping atomic.Bool

	mu      sync.Mutex
	running *embed.Etcd
}

// pickAttempts bounds how often Start picks new free ports after another
// process took the ones it picked before etcd bound them.
const pickAttempts = 5

// pickPorts is freeport.Ports; a test makes it hand out a taken port.
var pickPorts = freeport.Ports

// Start runs a single-member etcd and waits until it serves. Ports it picked
// itself that another process bound first (between the probe and etcd's
// bind: a suite's thousands of connections, another binary picking ports)
// are picked again; configured ports are not.
func Start(c Config) (*Member, error) {
	portLock.Lock()
	defer portLock.Unlock()
	for attempt := 1; ; attempt++ {
		m, err := c.newMember()
		if err != nil {
			return nil, err
		}
		err = m.Start()
		if err == nil {
			return m, nil
		}
		picked := c.ClientPort == 0 || c.PeerPort == 0
		// etcd binds its listeners before it opens its data directory, so
		// a failed bind leaves nothing behind to clean up.
		if !picked || !errors.Is(err, syscall.EADDRINUSE) || attempt == pickAttempts {
			return nil, err
		}
	}
}

// Endpoint is the client URL, for clients and storagebackend configs.
func (m *Member) Endpoint() string { return m.cfg.AdvertiseClientUrls[0].String() }

// Endpoints are the client URLs.
func (m *Member) Endpoints() []string { return []string{m.Endpoint()} }

// Dir is the member's data directory.
func (m *Member) Dir() string { return m.cfg.Dir }

// Start starts a stopped member on its ports and data and waits until it
// serves. Starting a running member does nothing.
func (m *Member) Start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.running != nil {
		return nil
	}
	// On a restart the data directory already names the cluster, and etcd
	// ignores the initial-cluster settings.
	srv, err := embed.StartEtcd(m.cfg)
	if err != nil {
		return fmt.Errorf("starting embedded etcd in %s: %w", m.cfg.Dir, err)
	}
	select {
	case <-srv.Server.ReadyNotify():
	case <-time.After(ReadyTimeout):
		srv.Close()
		return fmt.Errorf("embedded etcd not ready after %v", ReadyTimeout)
	}
	m.running = srv
	return nil
}

// Stop shuts the member down and keeps its data. Stopping a stopped member
// does nothing.
func (m *Member) Stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.running != nil {
		m.stopping.Store(true)
		defer m.stopping.Store(false)
		m.running.Close()
		m.running = nil
	}
}

// Restart stops the member and starts it again on the same ports and data.
func (m *Member) Restart() error {
	m.Stop()
	return m.Start()
}

// Kill stops the member abruptly: raft stops at once, without handing
// leadership over, so a leader's peers must notice its loss and elect
// another. Its client connections are cut only when etcd's shutdown stops
// waiting for open gRPC streams (its request timeout, about 7s, which Kill
// waits for): until then a client watching through this member hears
// nothing, as from a frozen member. Its data is kept and Start brings it
// back. Killing a stopped member does nothing.
func (m *Member) Kill() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.running != nil {
		m.stopping.Store(true)
		defer m.stopping.Store(false)
		m.running.Server.HardStop()
		m.running.Close()
		m.running = nil
	}
}

// Err carries the running member's fatal error; nil when it is stopped.
func (m *Member) Err() <-chan error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.running == nil {
		return nil
	}
	return m.running.Err()
}

// Running reports whether the member is started.
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.running != nil
}

// IsLeader reports whether the member runs and sees itself as the leader.
func (m *Member) IsLeader() bool {
	id, lead, ok := m.raftIDs()
	return ok && lead != 0 && id == lead
}

// raftIDs are the member's own ID and the leader it knows of (0: none).
func (m *Member) raftIDs() (id, lead uint64, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.running == nil {
		return 0, 0, false
	}
	s := m.running.Server
	return uint64(s.MemberID()), uint64(s.Leader()), true
}

// Cluster is a multi-member etcd, every member on its own loopback ports and
// data directory. Each member stops and restarts as a single member does.
type Cluster struct {
	Members []*Member
}

// StartCluster runs one member per config as a new cluster and waits until
// every member is ready (which needs a quorum, hence all members start at
// once). On an error no member is left running.
func StartCluster(cs []Config) (*Cluster, error) {
	if len(cs) < 1 {
		return nil, errors.New("a cluster needs at least one member")
	}
	portLock.Lock()
	defer portLock.Unlock()

	token := fmt.Sprintf("watchkeeper-%d", time.Now().UnixNano())
	c := &Cluster{Members: make([]*Member, len(cs))}
	initial := make([]string, len(cs))
	for i, mc := range cs {
		m, err := mc.newMember()
		if err != nil {
			return nil, err
		}
		m.cfg.InitialClusterToken = token
		m.cfg.ClusterState = embed.ClusterStateFlagNew
		c.Members[i] = m
		initial[i] = m.cfg.Name + "=" + m.cfg.AdvertisePeerUrls[0].String()
	}
	for _, m := range c.Members {
		m.cfg.InitialCluster = strings.Join(initial, ",")
	}

	// Every member waits for the others before it is ready: start them all
	// at once. The port lock is held until they have bound their ports.
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, m := range c.Members {
		wg.Go(func() {
			if err := m.Start(); err != nil {
				errs[i] = fmt.Errorf("member %d: %w", i, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// Endpoints are every member's client URLs, for a client that fails over.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, m := range c.Members {
		out = append(out, m.Endpoints()...)
	}
	return out
}

// Stop stops every member, keeping their data.
func (c *Cluster) Stop() {
	var wg sync.WaitGroup
	for _, m := range c.Members {
		wg.Go(m.Stop)
	}
	wg.Wait()
}

// Leader is the index of the running member that is the leader, as that
// member sees it, or -1 when no running member leads.
func (c *Cluster) Leader() int {
	for i, m := range c.Members {
		if m.IsLeader() {
			return i
		}
	}
	return -1
}

// WaitLeader waits up to d until one running member leads and every
// running member agrees on it, and returns its index.
func (c *Cluster) WaitLeader(d time.Duration) (int, error) {
	deadline := time.Now().Add(d)
	for {
		if i := c.agreedLeader(); i >= 0 {
			return i, nil
		}
		if time.Now().After(deadline) {
			return -1, fmt.Errorf("no leader that every running member agrees on after %v", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *Cluster) agreedLeader() int {
	leader := -1
	var lead uint64
	for i, m := range c.Members {
		id, l, ok := m.raftIDs()
		if !ok {
			continue
		}
		if l == 0 || (lead != 0 && l != lead) {
			return -1
		}
		lead = l
		if id == l {
			leader = i
		}
	}
	return leader
}
