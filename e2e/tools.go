//go:build tools

// Package tools pins the commands make e2e and make kube-e2e build from
// this module.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"

	// The runner of Kubernetes' e2e tests (make kube-e2e).
	_ "github.com/onsi/ginkgo/v2/ginkgo"
)
