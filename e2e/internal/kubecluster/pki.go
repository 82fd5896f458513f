// Package kubecluster is what the e2e drivers share to run Kubernetes on
// loopback: the certificates of a cluster, child processes, and
// kube-apiserver's flags, kubeconfigs and readiness.
package kubecluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// PKI is every certificate and key of the e2e cluster, as files in Dir:
//
//	ca.crt/.key                       the cluster CA: kube-apiserver's serving cert and client certs
//	apiserver.crt/.key                kube-apiserver's serving cert (127.0.0.1, localhost, kubernetes.default.svc)
//	front-proxy-ca.crt/.key           the front-proxy CA (--requestheader-client-ca-file)
//	front-proxy-client.crt/.key       the aggregator's client cert (--proxy-client-*), CN front-proxy-client
//	sa.key/sa.pub                     the service-account signing key pair
//	admin.crt/.key                    the e2e admin, CN e2e-admin, O system:masters
//	getter.crt/.key                   a user with no groups, CN e2e-getter (RBAC: get widgets only)
//	kube-controller-manager.crt/.key  CN system:kube-controller-manager (its built-in RBAC)
//	kube-scheduler.crt/.key           CN system:kube-scheduler (its built-in RBAC)
type PKI struct {
	Dir string

	ca, frontProxyCA *keyPair
}

type keyPair struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// Names of the client identities.
const (
	FrontProxyClientName = "front-proxy-client"
	AdminUser            = "e2e-admin"
	GetterUser           = "e2e-getter"
)

// Path is the file name in the PKI's directory.
func (p *PKI) Path(name string) string { return filepath.Join(p.Dir, name) }

// NewPKI generates the lot in dir; ECDSA P-256 keys, valid for a day.
func NewPKI(dir string) (*PKI, error) {
	p := &PKI{Dir: dir}
	var err error
	if p.ca, err = p.newCA("e2e-cluster-ca", "ca"); err != nil {
		return nil, err
	}
	if p.frontProxyCA, err = p.newCA("e2e-front-proxy-ca", "front-proxy-ca"); err != nil {
		return nil, err
	}
	serving := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(ServiceClusterIP)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if err := p.issue(p.ca, serving, "apiserver"); err != nil {
		return nil, err
	}
	clients := []struct {
		ca     *keyPair
		cn     string
		groups []string
		file   string
	}{
		{p.frontProxyCA, FrontProxyClientName, nil, "front-proxy-client"},
		{p.ca, AdminUser, []string{"system:masters"}, "admin"},
		{p.ca, GetterUser, nil, "getter"},
		{p.ca, "system:kube-controller-manager", nil, "kube-controller-manager"},
		{p.ca, "system:kube-scheduler", nil, "kube-scheduler"},
	}
	for _, c := range clients {
		tmpl := &x509.Certificate{
			Subject:     pkix.Name{CommonName: c.cn, Organization: c.groups},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}
		if err := p.issue(c.ca, tmpl, c.file); err != nil {
			return nil, err
		}
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if err := writeKey(p.Path("sa.key"), saKey); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return nil, err
	}
	return p, writePEM(p.Path("sa.pub"), "PUBLIC KEY", pub, 0o644)
}

func (p *PKI) newCA(cn, file string) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	if err := writePEM(p.Path(file+".crt"), "CERTIFICATE", der, 0o644); err != nil {
		return nil, err
	}
	return &keyPair{cert, key}, writeKey(p.Path(file+".key"), key)
}

// issue signs tmpl with ca and writes file.crt and file.key.
func (p *PKI) issue(ca *keyPair, tmpl *x509.Certificate, file string) error {
	der, key, err := sign(ca, tmpl)
	if err != nil {
		return fmt.Errorf("signing %s: %w", file, err)
	}
	if err := writePEM(p.Path(file+".crt"), "CERTIFICATE", der, 0o644); err != nil {
		return err
	}
	return writeKey(p.Path(file+".key"), key)
}

// ClientCert issues a client certificate of the cluster CA for user cn in
// groups, kept in memory (PEM), for drivers that need many identities (one
// per simulated kubelet: system:node:NAME in system:nodes).
func (p *PKI) ClientCert(cn string, groups []string) (certPEM, keyPEM []byte, err error) {
	der, key, err := sign(p.ca, &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("signing %s: %w", cn, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// sign fills tmpl's serial, validity (a day) and key usage, and signs it
// with ca for a new key.
func sign(ca *keyPair, tmpl *x509.Certificate) ([]byte, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial()
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	tmpl.BasicConstraintsValid = true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	return der, key, err
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n.Add(n, big.NewInt(1))
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "EC PRIVATE KEY", der, 0o600)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}
