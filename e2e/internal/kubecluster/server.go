package kubecluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/watchkeeper/watchkeeper/internal/etcdlaunch"
	"github.com/watchkeeper/watchkeeper/internal/freeport"
	"github.com/watchkeeper/watchkeeper/internal/netfault"
)

// Server is one kube-apiserver on watchkeeper's binary, with an etcd of its
// own in the driver's process; optionally behind a proxy that can cut it
// from etcd.
type Server struct {
	Name, Dir, Decorator string
	Etcd                 *etcdlaunch.Member
	Proxy                *netfault.Proxy
	KAS                  *Child
	URL                  string
	AdminKubeconfig      string
	Admin                *rest.Config
	Client               kubernetes.Interface
	HTTP                 *http.Client

	// What Restart starts again.
	binary, logPath string
	args            []string
}

// ServerConfig says how to start one.
type ServerConfig struct {
	Name      string // also the directory and log name
	Binary    string // kube-apiserver on watchkeeper (make kube-apiserver)
	Decorator string // --watch-cache-decorator
	ViaProxy  bool   // reach etcd through a netfault proxy
	Args      []string
}

// StartServer starts etcd and kube-apiserver in runDir with pki's
// certificates and waits for /readyz.
func StartServer(ctx context.Context, runDir string, pki *PKI, sc ServerConfig) (*Server, error) {
	s := &Server{Name: sc.Name, Dir: filepath.Join(runDir, sc.Name), Decorator: sc.Decorator,
		binary: sc.Binary, logPath: filepath.Join(runDir, sc.Name+".log")}
	logger, err := etcdlaunch.NewLogger(filepath.Join(runDir, sc.Name+"-etcd.log"))
	if err != nil {
		return nil, err
	}
	s.Etcd, err = etcdlaunch.Start(etcdlaunch.Config{
		Name:                   sc.Name + "-etcd",
		Dir:                    filepath.Join(s.Dir, "etcd"),
		Logger:                 logger,
		NoFsync:                true, // thrown away at the end
		ProgressNotifyInterval: etcdlaunch.ProgressNotifyInterval,
	})
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	endpoint := s.Etcd.Endpoint()
	if sc.ViaProxy {
		target := strings.TrimPrefix(endpoint, "http://")
		if s.Proxy, err = netfault.New(netfault.Config{Target: target}); err != nil {
			s.Stop()
			return nil, err
		}
		endpoint = "http://" + s.Proxy.Addr()
	}
	for attempt := 1; ; attempt++ {
		err := s.startKubeAPIServer(ctx, runDir, pki, endpoint, sc)
		if err == nil {
			return s, nil
		}
		// The port was free when picked; another process may bind it
		// before kube-apiserver does (a suite's thousands of
		// connections). Pick again; anything else is the caller's.
		if !errors.Is(err, errPortTaken) || attempt == portAttempts {
			s.Stop()
			return nil, err
		}
	}
}

// portAttempts bounds how often StartServer picks a new port for
// kube-apiserver after another process took the one it picked.
const portAttempts = 3

var errPortTaken = errors.New("its port was taken")

// startKubeAPIServer starts kube-apiserver on a free port against endpoint
// and waits for /readyz; errPortTaken if it exited because another process
// bound that port first.
func (s *Server) startKubeAPIServer(ctx context.Context, runDir string, pki *PKI, endpoint string, sc ServerConfig) error {
	port, err := freeport.Port()
	if err != nil {
		return err
	}
	s.URL = "https://127.0.0.1:" + strconv.Itoa(port)
	s.args = KubeAPIServerArgs(pki, endpoint, port, s.Dir)
	s.args = append(s.args, "--watch-cache-decorator="+sc.Decorator)
	s.args = append(s.args, sc.Args...)
	if s.KAS, err = StartChild(sc.Name, s.logPath, sc.Binary, s.args...); err != nil {
		return err
	}
	s.AdminKubeconfig = filepath.Join(runDir, sc.Name+"-admin.kubeconfig")
	if err := pki.WriteCertKubeconfig(s.AdminKubeconfig, s.URL, AdminUser, "admin"); err != nil {
		return err
	}
	if s.Admin, err = clientcmd.BuildConfigFromFlags("", s.AdminKubeconfig); err != nil {
		return err
	}
	s.Admin.QPS, s.Admin.Burst = -1, 0
	if s.Client, err = kubernetes.NewForConfig(s.Admin); err != nil {
		return err
	}
	if s.HTTP, err = rest.HTTPClientFor(s.Admin); err != nil {
		return err
	}
	err = WaitReady(ctx, s.KAS, s.Admin, s.URL, 3*time.Minute)
	if err != nil && !s.KAS.Running() && strings.Contains(s.KAS.LogTail(), "address already in use") {
		return fmt.Errorf("kube-apiserver on port %d: %w: %v", port, errPortTaken, err)
	}
	return err
}

// Restart stops kube-apiserver (SIGTERM, SIGKILL after grace), starts it
// again with the same flags on the same port and etcd, and waits for
// /readyz. It returns when the old process exited and when the new one was
// ready.
func (s *Server) Restart(ctx context.Context, grace time.Duration) (exited, ready time.Time, err error) {
	return s.RestartNotify(ctx, grace, nil)
}

// RestartNotify is Restart that calls started (when not nil) as soon as the
// new process runs, before it is ready: for work that must watch the
// new process's start, such as a profile of it.
func (s *Server) RestartNotify(ctx context.Context, grace time.Duration, started func()) (exited, ready time.Time, err error) {
	s.KAS.Stop(grace)
	exited = time.Now()
	if s.KAS, err = StartChild(s.Name, s.logPath, s.binary, s.args...); err != nil {
		return exited, time.Time{}, err
	}
	if started != nil {
		started()
	}
	if err := WaitReady(ctx, s.KAS, s.Admin, s.URL, 3*time.Minute); err != nil {
		return exited, time.Time{}, err
	}
	return exited, time.Now(), nil
}

// Stop stops kube-apiserver (SIGTERM, then SIGKILL after 90s), the proxy and
// etcd; safe on a half-started server and twice.
func (s *Server) Stop() {
	if s.KAS != nil && s.KAS.Running() {
		s.KAS.Stop(90 * time.Second)
	}
	if s.Proxy != nil {
		s.Proxy.Close()
		s.Proxy = nil
	}
	if s.Etcd != nil {
		s.Etcd.Stop()
		s.Etcd = nil
	}
}

// Get GETs path as the admin and returns the status code and body.
func (s *Server) Get(ctx context.Context, path string) (int, string, error) {
	code, body, err := s.GetBytes(ctx, path, 30*time.Second)
	return code, string(body), err
}

// GetBytes is Get with a timeout of the caller's, for long answers such as
// profiles.
func (s *Server) GetBytes(ctx context.Context, path string, timeout time.Duration) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+path, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := s.HTTP.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// Sample is one series of a metrics scrape.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

var (
	seriesLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)`)
	labelPair  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// Metrics scrapes /metrics and returns the series whose name starts with
// one of prefixes.
func (s *Server) Metrics(ctx context.Context, prefixes ...string) ([]Sample, error) {
	code, body, err := s.Get(ctx, "/metrics")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %d", code)
	}
	return ParseMetrics(body, prefixes...), nil
}

// ParseMetrics reads the series of a text exposition whose name starts
// with one of prefixes.
func ParseMetrics(body string, prefixes ...string) []Sample {
	var out []Sample
	for _, line := range strings.Split(body, "\n") {
		if !slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(line, p) }) {
			continue
		}
		m := seriesLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			continue
		}
		labels := map[string]string{}
		for _, p := range labelPair.FindAllStringSubmatch(m[2], -1) {
			labels[p[1]] = p[2]
		}
		out = append(out, Sample{Name: m[1], Labels: labels, Value: v})
	}
	return out
}

// Family is a metric's name without a histogram's suffixes.
func Family(name string) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if strings.HasSuffix(name, suffix) {
			return strings.TrimSuffix(name, suffix)
		}
	}
	return name
}

// ResourcesOf maps each metric family to the group/resources it has a
// series for.
func ResourcesOf(samples []Sample) map[string]map[schema.GroupResource]bool {
	out := map[string]map[schema.GroupResource]bool{}
	for _, s := range samples {
		r, ok := s.Labels["resource"]
		if !ok {
			continue
		}
		f := Family(s.Name)
		if out[f] == nil {
			out[f] = map[schema.GroupResource]bool{}
		}
		out[f][schema.GroupResource{Group: s.Labels["group"], Resource: r}] = true
	}
	return out
}
