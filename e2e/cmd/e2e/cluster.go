package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/watchkeeper/watchkeeper/internal/etcdlaunch"
	"github.com/watchkeeper/watchkeeper/internal/freeport"
)

const (
	serviceClusterIPRange = "10.0.0.0/24"
	serviceClusterIP      = "10.0.0.1" // the kubernetes service: first of the range
	sampleNamespace       = "watchkeeper"
	sampleService         = "sample-apiserver"
	apiServiceName        = "v1alpha1.demo.watchkeeper.io"
)

// cluster is what the driver runs: two etcd members in its own process (one
// for kube-apiserver, one for the sample apiserver, as the deployment gives
// the sample its own etcd), kube-apiserver and the sample apiserver as
// children. Every port is on 127.0.0.1.
type cluster struct {
	dir string
	pki *pki
	cfg config

	kubeEtcd, sampleEtcd *etcdlaunch.Member
	kas                  *child
	kasURL               string
	sample               *child
	samplePort           int
	sampleKubeconfig     string

	adminKubeconfig  string
	getterKubeconfig string
	admin            *rest.Config
}

// stop stops every child and etcd member; safe on a half-built cluster.
func (c *cluster) stop() {
	if c.sample != nil && c.sample.running() {
		c.sample.stop(15 * time.Second)
	}
	if c.kas != nil && c.kas.running() {
		c.kas.stop(15 * time.Second)
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
	p := c.pki.path
	args := []string{
		"--etcd-servers=" + c.kubeEtcd.Endpoint(),
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--advertise-address=127.0.0.1",
		// A loopback advertise address is not a valid endpoint: the
		// kubernetes service's reconciler would fail forever.
		"--endpoint-reconciler-type=none",
		"--cert-dir=" + filepath.Join(c.dir, "kube-apiserver"),
		"--tls-cert-file=" + p("apiserver.crt"),
		"--tls-private-key-file=" + p("apiserver.key"),
		"--client-ca-file=" + p("ca.crt"),
		"--service-account-key-file=" + p("sa.pub"),
		"--service-account-signing-key-file=" + p("sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=" + serviceClusterIPRange,
		"--authorization-mode=Node,RBAC",
		"--requestheader-client-ca-file=" + p("front-proxy-ca.crt"),
		"--requestheader-allowed-names=" + frontProxyClientName,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + p("front-proxy-client.crt"),
		"--proxy-client-key-file=" + p("front-proxy-client.key"),
		// Endpoints and EndpointSlices may not name a loopback address
		// (validation: "may not be in the loopback range"), so the
		// APIService's Service is an ExternalName 127.0.0.1, which only the
		// cluster-IP routing (the default, false) resolves.
		"--enable-aggregator-routing=false",
	}
	kas, err := startChild("kube-apiserver", filepath.Join(c.dir, "kube-apiserver.log"), c.cfg.kubeAPIServer, args...)
	if err != nil {
		return err
	}
	c.kas = kas
	c.adminKubeconfig = filepath.Join(c.dir, "admin.kubeconfig")
	c.getterKubeconfig = filepath.Join(c.dir, "getter.kubeconfig")
	if err := c.writeCertKubeconfig(c.adminKubeconfig, adminUser, "admin"); err != nil {
		return err
	}
	if err := c.writeCertKubeconfig(c.getterKubeconfig, getterUser, "getter"); err != nil {
		return err
	}
	if c.admin, err = clientcmd.BuildConfigFromFlags("", c.adminKubeconfig); err != nil {
		return err
	}
	c.admin.QPS, c.admin.Burst = -1, 0
	return c.waitReady(ctx, c.kas, c.admin, c.kasURL, 2*time.Minute)
}

// writeCertKubeconfig writes a kubeconfig for kube-apiserver with the
// client certificate file.crt, the CA inlined.
func (c *cluster) writeCertKubeconfig(path, user, file string) error {
	caData, err := os.ReadFile(c.pki.path("ca.crt"))
	if err != nil {
		return err
	}
	certData, err := os.ReadFile(c.pki.path(file + ".crt"))
	if err != nil {
		return err
	}
	keyData, err := os.ReadFile(c.pki.path(file + ".key"))
	if err != nil {
		return err
	}
	return writeKubeconfig(path, c.kasURL, caData, &clientcmdapi.AuthInfo{ClientCertificateData: certData, ClientKeyData: keyData}, user)
}

func writeKubeconfig(path, server string, caData []byte, auth *clientcmdapi.AuthInfo, user string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["e2e"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caData}
	kc.AuthInfos[user] = auth
	kc.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: user, Namespace: "default"}
	kc.CurrentContext = "e2e"
	return clientcmd.WriteToFile(*kc, path)
}

// waitReady polls /readyz of a server with cfg's credentials until it
// answers 200, the child exits or timeout passes.
func (c *cluster) waitReady(ctx context.Context, ch *child, cfg *rest.Config, url string, timeout time.Duration) error {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	hc.Timeout = 5 * time.Second
	deadline := time.Now().Add(timeout)
	var last string
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/readyz", nil)
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if !ch.running() {
			return fmt.Errorf("%s exited (%v); log %s:\n%s", ch.name, ch.waitErr, ch.logPath, ch.logTail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v: %s; log %s", ch.name, timeout, last, ch.logPath)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
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
	s, err := startChild("sample-apiserver", filepath.Join(c.dir, "sample-apiserver.log"), c.cfg.sample, c.sampleArgs()...)
	if err != nil {
		return err
	}
	c.sample = s
	return c.waitReady(ctx, s, c.frontProxyConfig("e2e-driver", "system:masters"), c.sampleURL(), 2*time.Minute)
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
			CertFile: c.pki.path("front-proxy-client.crt"),
			KeyFile:  c.pki.path("front-proxy-client.key"),
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
