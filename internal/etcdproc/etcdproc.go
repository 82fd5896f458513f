// Package etcdproc runs etcd members as child processes, one member per
// process, each an etcdlaunch member inside the child. A member's kill is
// then a real SIGKILL of a process, its crash (a panic, a SIGSEGV of etcd's
// own) ends only that process, and its caller survives to report it: with
// members inside the caller's process, a member being stopped while
// another goroutine of the process called it (etcd issue 22189: Maintenance
// Status answered from a closed backend) took the whole process down.
//
// The child is a program of the caller's (a binary with a subcommand that
// calls Main); Member runs it with the member's flags (Spec.args).
//
// It returns errors and never imports "testing", so binaries may use it.
package etcdproc

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/watchkeeper/watchkeeper/internal/childproc"
	"github.com/watchkeeper/watchkeeper/internal/etcdlaunch"
	"github.com/watchkeeper/watchkeeper/internal/freeport"
)

// readyLine is what the child prints on stdout once its member serves.
const readyLine = "etcdproc: ready"

// Spec is one member: what the child runs, on fixed ports, so that a
// restart is the same member on the same ports and data.
type Spec struct {
	Name string
	// Dir is the data directory; LogPath receives etcd's log and the
	// child's stderr.
	Dir, LogPath string
	// ClientPort and PeerPort are the loopback ports it listens on.
	ClientPort, PeerPort int
	// AdvertisePeerURL is the peer URL its peers dial ("" : its listener),
	// InitialCluster and ClusterToken the cluster's (etcdlaunch.Config).
	AdvertisePeerURL, InitialCluster, ClusterToken string
	// ProgressNotifyInterval as in etcdlaunch.Config; 0 keeps etcd's.
	ProgressNotifyInterval time.Duration
	// NoFsync as in etcdlaunch.Config.
	NoFsync bool
}

// PeerURL is the listener's peer URL.
func (s Spec) PeerURL() string { return "http://127.0.0.1:" + strconv.Itoa(s.PeerPort) }

// Endpoint is the client URL.
func (s Spec) Endpoint() string { return "http://127.0.0.1:" + strconv.Itoa(s.ClientPort) }

func (s Spec) args() []string {
	return []string{
		"-name=" + s.Name, "-dir=" + s.Dir, "-log=" + s.LogPath,
		"-client-port=" + strconv.Itoa(s.ClientPort), "-peer-port=" + strconv.Itoa(s.PeerPort),
		"-advertise-peer-url=" + s.AdvertisePeerURL, "-initial-cluster=" + s.InitialCluster, "-token=" + s.ClusterToken,
		"-progress-notify-interval=" + s.ProgressNotifyInterval.String(), "-no-fsync=" + strconv.FormatBool(s.NoFsync),
	}
}

// Main is the child: it runs the member its flags describe, prints the
// ready line, and serves until SIGTERM or SIGINT (a graceful stop, exit 0)
// or a fatal error of etcd's (exit 1).
func Main(args []string) int {
	fs := flag.NewFlagSet("etcd", flag.ContinueOnError)
	var c etcdlaunch.Config
	var logPath string
	fs.StringVar(&c.Name, "name", "etcd", "member name")
	fs.StringVar(&c.Dir, "dir", "", "data directory")
	fs.StringVar(&logPath, "log", "", "etcd's log file (default stderr)")
	fs.IntVar(&c.ClientPort, "client-port", 0, "loopback client port")
	fs.IntVar(&c.PeerPort, "peer-port", 0, "loopback peer port")
	fs.StringVar(&c.AdvertisePeerURL, "advertise-peer-url", "", "peer URL to advertise")
	fs.StringVar(&c.InitialCluster, "initial-cluster", "", "name=peerURL,... of every member")
	fs.StringVar(&c.ClusterToken, "token", "", "initial cluster token")
	fs.DurationVar(&c.ProgressNotifyInterval, "progress-notify-interval", 0, "watch progress notify interval")
	fs.BoolVar(&c.NoFsync, "no-fsync", false, "turn fsync off")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	logger, err := etcdlaunch.NewLogger(logPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c.Logger = logger
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	m, err := etcdlaunch.Start(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(readyLine)
	select {
	case <-sig:
		m.Stop()
		return 0
	case err := <-m.Err():
		fmt.Fprintf(os.Stderr, "etcd failed: %v\n", err)
		return 1
	}
}

// Member is one member as a child process that can be stopped, killed and
// started again.
type Member struct {
	Spec Spec
	// Command is the program and arguments that make it the child (Main).
	Command []string
	// OnExit, if set, is called (in a goroutine of its own) when the
	// process exits without being told to: a crash.
	OnExit func(m *Member, err error)

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
	exitErr  error
	stopping bool
	crashes  int
}

// ReadyTimeout bounds how long Start waits for the member to serve.
const ReadyTimeout = time.Minute

// StopGrace is how long Stop waits after SIGTERM before SIGKILL.
const StopGrace = 30 * time.Second

// Start starts the member's process unless it runs, and waits until it
// serves (a member of a cluster serves once a quorum runs: start them
// together).
func (m *Member) Start() error {
	m.mu.Lock()
	if m.cmd != nil {
		m.mu.Unlock()
		return nil
	}
	log, err := os.OpenFile(m.Spec.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		m.mu.Unlock()
		return err
	}
	defer log.Close() // the child has its own descriptor
	cmd := exec.Command(m.Command[0], append(append([]string(nil), m.Command[1:]...), m.Spec.args()...)...)
	cmd.Stderr = log
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		m.mu.Unlock()
		return err
	}
	exited := make(chan struct{})
	// The child dies with this process.
	err = childproc.Start(cmd, func(err error) {
		m.mu.Lock()
		m.exitErr = err
		crashed := !m.stopping
		if crashed {
			m.crashes++
		}
		m.cmd = nil
		m.mu.Unlock()
		close(exited)
		if crashed && m.OnExit != nil {
			go m.OnExit(m, err)
		}
	})
	if err != nil {
		m.mu.Unlock()
		return fmt.Errorf("starting etcd member %s: %w", m.Spec.Name, err)
	}
	m.cmd, m.exited, m.stopping = cmd, exited, false
	m.mu.Unlock()

	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		ok := false
		for sc.Scan() {
			if sc.Text() == readyLine {
				ok = true
				break
			}
		}
		ready <- ok
		_, _ = io.Copy(io.Discard, stdout) // never block the child
	}()
	select {
	case ok := <-ready:
		if ok {
			return nil
		}
		<-exited
		return fmt.Errorf("etcd member %s exited before serving (%v); log %s:\n%s", m.Spec.Name, m.ExitErr(), m.Spec.LogPath, logTail(m.Spec.LogPath))
	case <-time.After(ReadyTimeout):
		m.Kill()
		return fmt.Errorf("etcd member %s not serving after %v; log %s", m.Spec.Name, ReadyTimeout, m.Spec.LogPath)
	}
}

// Stop stops the member gracefully (SIGTERM; SIGKILL after StopGrace) and
// waits for its exit. Stopping a stopped member does nothing.
func (m *Member) Stop() { m.end(syscall.SIGTERM) }

// Kill kills the member's process (SIGKILL) and waits for its exit: raft
// stops without handing leadership over, connections are reset by the
// kernel. Its data stays for Start.
func (m *Member) Kill() { m.end(syscall.SIGKILL) }

func (m *Member) end(sig syscall.Signal) {
	m.mu.Lock()
	cmd, exited := m.cmd, m.exited
	if cmd == nil {
		m.mu.Unlock()
		return
	}
	m.stopping = true
	m.mu.Unlock()
	_ = cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(StopGrace):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// Running reports whether the process runs.
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cmd != nil
}

// PID is the running process's, or 0.
func (m *Member) PID() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return 0
	}
	return m.cmd.Process.Pid
}

// Crashes counts the exits no Stop or Kill asked for.
func (m *Member) Crashes() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.crashes
}

// ExitErr is how the last process exited.
func (m *Member) ExitErr() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.exitErr
}

func logTail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return string(data[max(0, len(data)-4000):])
}

// Cluster is members of one cluster, each a process.
type Cluster struct {
	Members []*Member
}

// NewCluster makes (and does not start) one member per spec, as a new
// cluster: it picks the ports left 0, and sets the initial cluster and
// token from the specs' advertised peer URLs (a spec's own listener where
// it has none). advertise, if set, maps each member's index and peer
// listener URL to the URL it advertises (a proxy in front of it), after
// the ports are picked.
func NewCluster(command []string, specs []Spec, advertise func(i int, peerURL string) (string, error)) (*Cluster, error) {
	ports, err := freeport.Ports(2 * len(specs))
	if err != nil {
		return nil, err
	}
	token := fmt.Sprintf("etcdproc-%d", time.Now().UnixNano())
	initial := make([]string, len(specs))
	for i := range specs {
		s := &specs[i]
		if s.ClientPort == 0 {
			s.ClientPort = ports[2*i]
		}
		if s.PeerPort == 0 {
			s.PeerPort = ports[2*i+1]
		}
		if advertise != nil {
			if s.AdvertisePeerURL, err = advertise(i, s.PeerURL()); err != nil {
				return nil, err
			}
		}
		adv := s.AdvertisePeerURL
		if adv == "" {
			adv = s.PeerURL()
		}
		initial[i] = s.Name + "=" + adv
	}
	c := &Cluster{}
	for _, s := range specs {
		s.InitialCluster, s.ClusterToken = strings.Join(initial, ","), token
		c.Members = append(c.Members, &Member{Spec: s, Command: command})
	}
	return c, nil
}

// StartAll starts every member not running, together, and waits until each
// serves.
func (c *Cluster) StartAll() error {
	errs := make([]error, len(c.Members))
	var wg sync.WaitGroup
	for i, m := range c.Members {
		wg.Go(func() { errs[i] = m.Start() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Stop stops every member.
func (c *Cluster) Stop() {
	var wg sync.WaitGroup
	for _, m := range c.Members {
		wg.Go(m.Stop)
	}
	wg.Wait()
}

// Endpoints are every member's client URL.
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.Members))
	for i, m := range c.Members {
		out[i] = m.Spec.Endpoint()
	}
	return out
}

// PIDs are the running members' processes.
func (c *Cluster) PIDs() []int {
	var out []int
	for _, m := range c.Members {
		if pid := m.PID(); pid != 0 {
			out = append(out, pid)
		}
	}
	return out
}

// Index is the member whose process is pid, or -1.
func (c *Cluster) Index(pid int) int {
	for i, m := range c.Members {
		if pid != 0 && m.PID() == pid {
			return i
		}
	}
	return -1
}

// status asks member i who it is and whom it follows.
func (c *Cluster) status(ctx context.Context, i int) (id, leader uint64, err error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.Members[i].Spec.Endpoint()}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return 0, 0, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := cli.Status(ctx, c.Members[i].Spec.Endpoint())
	if err != nil {
		return 0, 0, err
	}
	return st.Header.MemberId, st.Leader, nil
}

// Leader is the index of the member every running member that answers
// names as its leader, or -1 when they do not agree (an election, a member
// cut from the others).
func (c *Cluster) Leader(ctx context.Context) int {
	all := make([]int, len(c.Members))
	for i := range all {
		all[i] = i
	}
	return c.LeaderOf(ctx, all...)
}

// LeaderOf is the index of the member that the running ones of members
// that answer agree is the leader, or -1: the majority's leader while a
// member is cut off and still believes it leads.
func (c *Cluster) LeaderOf(ctx context.Context, members ...int) int {
	ids := map[uint64]int{}
	for i, m := range c.Members {
		if m.Running() {
			if id, _, err := c.status(ctx, i); err == nil {
				ids[id] = i
			}
		}
	}
	var leaders []uint64
	for _, i := range members {
		if !c.Members[i].Running() {
			continue
		}
		if _, lead, err := c.status(ctx, i); err == nil {
			leaders = append(leaders, lead)
		}
	}
	if len(leaders) == 0 || leaders[0] == 0 {
		return -1
	}
	for _, l := range leaders[1:] {
		if l != leaders[0] {
			return -1
		}
	}
	if i, ok := ids[leaders[0]]; ok {
		return i
	}
	return -1
}

// WaitLeader waits up to d for a leader every running member agrees on.
func (c *Cluster) WaitLeader(ctx context.Context, d time.Duration) (int, error) {
	deadline := time.Now().Add(d)
	for {
		if i := c.Leader(ctx); i >= 0 {
			return i, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return -1, fmt.Errorf("no leader every running member agrees on after %v", d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
