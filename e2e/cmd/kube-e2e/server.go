package main

import (
	"context"
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

	"github.com/watchkeeper/watchkeeper/e2e/internal/kubecluster"
	"github.com/watchkeeper/watchkeeper/internal/etcdlaunch"
	"github.com/watchkeeper/watchkeeper/internal/freeport"
	"github.com/watchkeeper/watchkeeper/internal/netfault"
)

// server is one kube-apiserver on watchkeeper's binary, with an etcd of its
// own in the driver's process; optionally behind a proxy that can cut it
// from etcd.
type server struct {
	name, dir, decorator string
	etcd                 *etcdlaunch.Member
	proxy                *netfault.Proxy
	kas                  *kubecluster.Child
	url                  string
	adminKubeconfig      string
	admin                *rest.Config
	client               kubernetes.Interface
	http                 *http.Client
}

// serverConfig says how to start one.
type serverConfig struct {
	name      string // also the directory and log name
	decorator string // --watch-cache-decorator
	viaProxy  bool   // reach etcd through a netfault proxy
	args      []string
}

// startServer starts etcd and kube-apiserver and waits for /readyz.
func startServer(ctx context.Context, run *runDir, binary string, sc serverConfig) (*server, error) {
	s := &server{name: sc.name, dir: filepath.Join(run.dir, sc.name), decorator: sc.decorator}
	logger, err := etcdlaunch.NewLogger(filepath.Join(run.dir, sc.name+"-etcd.log"))
	if err != nil {
		return nil, err
	}
	s.etcd, err = etcdlaunch.Start(etcdlaunch.Config{
		Name:                   sc.name + "-etcd",
		Dir:                    filepath.Join(s.dir, "etcd"),
		Logger:                 logger,
		NoFsync:                true, // thrown away at the end
		ProgressNotifyInterval: etcdlaunch.ProgressNotifyInterval,
	})
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	endpoint := s.etcd.Endpoint()
	if sc.viaProxy {
		target := strings.TrimPrefix(endpoint, "http://")
		if s.proxy, err = netfault.New(netfault.Config{Target: target}); err != nil {
			s.stop()
			return nil, err
		}
		endpoint = "http://" + s.proxy.Addr()
	}
	port, err := freeport.Port()
	if err != nil {
		s.stop()
		return nil, err
	}
	s.url = "https://127.0.0.1:" + strconv.Itoa(port)
	args := kubecluster.KubeAPIServerArgs(run.pki, endpoint, port, s.dir)
	args = append(args, "--watch-cache-decorator="+sc.decorator)
	args = append(args, sc.args...)
	if s.kas, err = kubecluster.StartChild(sc.name, filepath.Join(run.dir, sc.name+".log"), binary, args...); err != nil {
		s.stop()
		return nil, err
	}
	s.adminKubeconfig = filepath.Join(run.dir, sc.name+"-admin.kubeconfig")
	if err := run.pki.WriteCertKubeconfig(s.adminKubeconfig, s.url, kubecluster.AdminUser, "admin"); err != nil {
		s.stop()
		return nil, err
	}
	if s.admin, err = clientcmd.BuildConfigFromFlags("", s.adminKubeconfig); err != nil {
		s.stop()
		return nil, err
	}
	s.admin.QPS, s.admin.Burst = -1, 0
	if s.client, err = kubernetes.NewForConfig(s.admin); err != nil {
		s.stop()
		return nil, err
	}
	if s.http, err = rest.HTTPClientFor(s.admin); err != nil {
		s.stop()
		return nil, err
	}
	if err := kubecluster.WaitReady(ctx, s.kas, s.admin, s.url, 3*time.Minute); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// stop stops kube-apiserver (SIGTERM, then SIGKILL after 90s), the proxy and
// etcd; safe on a half-started server and twice.
func (s *server) stop() {
	if s.kas != nil && s.kas.Running() {
		s.kas.Stop(90 * time.Second)
	}
	if s.proxy != nil {
		s.proxy.Close()
		s.proxy = nil
	}
	if s.etcd != nil {
		s.etcd.Stop()
		s.etcd = nil
	}
}

// get GETs path as the admin and returns the status code and body.
func (s *server) get(ctx context.Context, path string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// sample is one series of a metrics scrape.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

var (
	seriesLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)`)
	labelPair  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// metrics scrapes /metrics and returns the series whose name starts with
// one of prefixes.
func (s *server) metrics(ctx context.Context, prefixes ...string) ([]sample, error) {
	code, body, err := s.get(ctx, "/metrics")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %d", code)
	}
	var out []sample
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
		out = append(out, sample{name: m[1], labels: labels, value: v})
	}
	return out, nil
}

// family is a metric's name without a histogram's suffixes.
func family(name string) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if strings.HasSuffix(name, suffix) {
			return strings.TrimSuffix(name, suffix)
		}
	}
	return name
}

// resourcesOf maps each metric family to the group/resources it has a
// series for.
func resourcesOf(samples []sample) map[string]map[schema.GroupResource]bool {
	out := map[string]map[schema.GroupResource]bool{}
	for _, s := range samples {
		r, ok := s.labels["resource"]
		if !ok {
			continue
		}
		f := family(s.name)
		if out[f] == nil {
			out[f] = map[schema.GroupResource]bool{}
		}
		out[f][schema.GroupResource{Group: s.labels["group"], Resource: r}] = true
	}
	return out
}
