package kubecluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The service network of the e2e clusters.
const (
	ServiceClusterIPRange = "10.0.0.0/24"
	ServiceClusterIP      = "10.0.0.1" // the kubernetes service: first of the range
)

// KubeAPIServerArgs are kube-apiserver's flags for a loopback cluster:
// etcd at etcdEndpoint, serving on 127.0.0.1:port with the PKI's
// certificates, its own files under dir.
func KubeAPIServerArgs(p *PKI, etcdEndpoint string, port int, dir string) []string {
	return []string{
		"--etcd-servers=" + etcdEndpoint,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--advertise-address=127.0.0.1",
		// A loopback advertise address is not a valid endpoint: the
		// kubernetes service's reconciler would fail forever.
		"--endpoint-reconciler-type=none",
		"--cert-dir=" + filepath.Join(dir, "kube-apiserver"),
		"--tls-cert-file=" + p.Path("apiserver.crt"),
		"--tls-private-key-file=" + p.Path("apiserver.key"),
		"--client-ca-file=" + p.Path("ca.crt"),
		"--service-account-key-file=" + p.Path("sa.pub"),
		"--service-account-signing-key-file=" + p.Path("sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=" + ServiceClusterIPRange,
		"--authorization-mode=Node,RBAC",
		"--requestheader-client-ca-file=" + p.Path("front-proxy-ca.crt"),
		"--requestheader-allowed-names=" + FrontProxyClientName,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + p.Path("front-proxy-client.crt"),
		"--proxy-client-key-file=" + p.Path("front-proxy-client.key"),
		// Endpoints and EndpointSlices may not name a loopback address
		// (validation: "may not be in the loopback range"), so an
		// APIService's Service is an ExternalName 127.0.0.1, which only the
		// cluster-IP routing (the default, false) resolves.
		"--enable-aggregator-routing=false",
	}
}

// WriteCertKubeconfig writes a kubeconfig for the server at url with the
// client certificate file.crt of the PKI, the CA inlined.
func (p *PKI) WriteCertKubeconfig(path, url, user, file string) error {
	caData, err := os.ReadFile(p.Path("ca.crt"))
	if err != nil {
		return err
	}
	certData, err := os.ReadFile(p.Path(file + ".crt"))
	if err != nil {
		return err
	}
	keyData, err := os.ReadFile(p.Path(file + ".key"))
	if err != nil {
		return err
	}
	return WriteKubeconfig(path, url, caData, &clientcmdapi.AuthInfo{ClientCertificateData: certData, ClientKeyData: keyData}, user)
}

// WriteKubeconfig writes a kubeconfig of one cluster, user and context.
func WriteKubeconfig(path, server string, caData []byte, auth *clientcmdapi.AuthInfo, user string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["e2e"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caData}
	kc.AuthInfos[user] = auth
	kc.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: user, Namespace: "default"}
	kc.CurrentContext = "e2e"
	return clientcmd.WriteToFile(*kc, path)
}

// WaitReady polls /readyz of a server with cfg's credentials until it
// answers 200, the child exits or timeout passes.
func WaitReady(ctx context.Context, ch *Child, cfg *rest.Config, url string, timeout time.Duration) error {
	return WaitFor(ctx, ch, cfg, url+"/readyz", http.StatusOK, timeout)
}

// WaitFor polls url with cfg's credentials until it answers status, the
// child exits or timeout passes.
func WaitFor(ctx context.Context, ch *Child, cfg *rest.Config, url string, status int, timeout time.Duration) error {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	hc.Timeout = 5 * time.Second
	deadline := time.Now().Add(timeout)
	var last string
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == status {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if !ch.Running() {
			return fmt.Errorf("%s exited (%v); log %s:\n%s", ch.Name, ch.WaitErr, ch.LogPath, ch.LogTail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s not %d after %v: %s; log %s", ch.Name, url, status, timeout, last, ch.LogPath)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
