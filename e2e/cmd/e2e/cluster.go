package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/watchkeeper/watchkeeper/e2e/internal/kubecluster"
	"github.com/watchkeeper/watchkeeper/internal/etcdlaunch"
	"github.com/watchkeeper/watchkeeper/internal/freeport"
)

const (
	sampleNamespace = "watchkeeper"
	sampleService   = "sample-apiserver"
	apiServiceName  = "v1alpha1.demo.watchkeeper.io"
)

// cluster is what the driver runs: two etcd members in its own process (one
// for kube-apiserver, one for the sample apiserver, as the deployment gives
// the sample its own etcd), kube-apiserver and the sample apiserver as
// children. Every port is on 127.0.0.1.
type cluster struct {
	dir string
	pki *kubecluster.PKI
	cfg config

	kubeEtcd, sampleEtcd *etcdlaunch.Member
	kas                  *kubecluster.Child
	kasURL               string
	sample               *kubecluster.Child
	samplePort           int
	sampleKubeconfig     string

	adminKubeconfig  string
	getterKubeconfig string
	admin            *rest.Config
}

// stop stops every child and etcd member; safe on a half-built cluster.
func (c *cluster) stop() {
	if c.sample != nil && c.sample.Running() {
		c.sample.Stop(15 * time.Second)
	}
	if c.kas != nil && c.kas.Running() {
		c.kas.Stop(15 * time.Second)
	}
	if c.sampleEtcd != nil {
		c.sampleEtcd.Stop()
	}
	if c.kubeEtcd != nil {
		c.kubeEtcd.Stop()
	}
}

func (c *cluster) startEtcd() error {
	logger, err := etcdlaunch.NewLogger(filepath.Join(c.dir, "etcd.log"))
	if err != nil {
		return err
	}
	for _, m := range []struct {
		name string
		dst  **etcdlaunch.Member
	}{{"kube-etcd", &c.kubeEtcd}, {"sample-etcd", &c.sampleEtcd}} {
		member, err := etcdlaunch.Start(etcdlaunch.Config{
			Name:                   m.name,
			Dir:                    filepath.Join(c.dir, m.name),
			Logger:                 logger,
			NoFsync:                true, // thrown away at the end
			ProgressNotifyInterval: etcdlaunch.ProgressNotifyInterval,
		})
		if err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		*m.dst = member
	}
	return nil
}

// startKubeAPIServer starts kube-apiserver, writes the admin and getter
// kubeconfigs and waits for /readyz.
func (c *cluster) startKubeAPIServer(ctx context.Context) error {
	port, err := freeport.Port()
	if err != nil {
		return err
	}
	c.kasURL = "https://127.0.0.1:" + strconv.Itoa(port)
	args := kubecluster.KubeAPIServerArgs(c.pki, c.kubeEtcd.Endpoint(), port, c.dir)
	kas, err := kubecluster.StartChild("kube-apiserver", filepath.Join(c.dir, "kube-apiserver.log"), c.cfg.kubeAPIServer, args...)
	if err != nil {
		return err
	}
	c.kas = kas
	c.adminKubeconfig = filepath.Join(c.dir, "admin.kubeconfig")
	c.getterKubeconfig = filepath.Join(c.dir, "getter.kubeconfig")
	if err := c.pki.WriteCertKubeconfig(c.adminKubeconfig, c.kasURL, kubecluster.AdminUser, "admin"); err != nil {
		return err
	}
	if err := c.pki.WriteCertKubeconfig(c.getterKubeconfig, c.kasURL, kubecluster.GetterUser, "getter"); err != nil {
		return err
	}
	if c.admin, err = clientcmd.BuildConfigFromFlags("", c.adminKubeconfig); err != nil {
		return err
	}
	c.admin.QPS, c.admin.Burst = -1, 0
	return kubecluster.WaitReady(ctx, c.kas, c.admin, c.kasURL, 2*time.Minute)
}

// sampleArgs are the sample apiserver's flags: aggregated (a kubeconfig of
// its service account), its own etcd, loopback, a short bookmark frequency
// so bookmarks show within a few seconds.
func (c *cluster) sampleArgs() []string {
	return []string{
		"--kubeconfig=" + c.sampleKubeconfig,
		"--authentication-kubeconfig=" + c.sampleKubeconfig,
		"--authorization-kubeconfig=" + c.sampleKubeconfig,
		"--etcd-servers=" + c.sampleEtcd.Endpoint(),
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(c.samplePort),
		"--cert-dir=" + filepath.Join(c.dir, "sample-apiserver"),
		"--watch-cache-bookmark-frequency=" + c.cfg.bookmarkFrequency.String(),
		"--watch-cache-bookmark-pre-deadline-offset=1s",
	}
}

// startSample starts the sample apiserver and waits until its /readyz
// answers the aggregator's identity (the front-proxy client cert).
func (c *cluster) startSample(ctx context.Context) error {
	s, err := kubecluster.StartChild("sample-apiserver", filepath.Join(c.dir, "sample-apiserver.log"), c.cfg.sample, c.sampleArgs()...)
	if err != nil {
		return err
	}
	c.sample = s
	return kubecluster.WaitReady(ctx, s, c.frontProxyConfig("e2e-driver", "system:masters"), c.sampleURL(), 2*time.Minute)
}

func (c *cluster) sampleURL() string { return "https://127.0.0.1:" + strconv.Itoa(c.samplePort) }

// frontProxyConfig talks to the sample apiserver directly as the
// aggregator does: the front-proxy client certificate and X-Remote-User /
// X-Remote-Group headers. The sample's serving cert is self-signed.
func (c *cluster) frontProxyConfig(user string, groups ...string) *rest.Config {
	return &rest.Config{
		Host: c.sampleURL(),
		TLSClientConfig: rest.TLSClientConfig{
			Insecure: true,
			CertFile: c.pki.Path("front-proxy-client.crt"),
			KeyFile:  c.pki.Path("front-proxy-client.key"),
		},
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
			return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
				req = req.Clone(req.Context())
				req.Header.Set("X-Remote-User", user)
				for _, g := range groups {
					req.Header.Add("X-Remote-Group", g)
				}
				return rt.RoundTrip(req)
			})
		},
		QPS: -1,
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// kubectl runs kubectl against kube-apiserver as kubeconfig's user, with
// a time limit; it returns the combined output.
func (c *cluster) kubectl(ctx context.Context, kubeconfig string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.cfg.kubectl, append([]string{"--kubeconfig=" + kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// insecureTLS is for the odd raw request whose server certificate does not
// matter (the sample's, self-signed).
var insecureTLS = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // e2e against a self-signed loopback server
