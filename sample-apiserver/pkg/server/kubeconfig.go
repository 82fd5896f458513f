package server

import (
	"fmt"
	"os"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// writeAdminKubeconfig writes a kubeconfig for the admin token with the
// serving CA inlined, mode 0600: it is a credential.
func writeAdminKubeconfig(path, server string, caData []byte, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["watchkeeper"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caData}
	cfg.AuthInfos[AdminUser] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["watchkeeper"] = &clientcmdapi.Context{Cluster: "watchkeeper", AuthInfo: AdminUser}
	cfg.CurrentContext = "watchkeeper"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("writing the admin kubeconfig: %w", err)
	}
	// WriteFile keeps the mode of an existing file: make sure.
	return os.Chmod(path, 0o600)
}
