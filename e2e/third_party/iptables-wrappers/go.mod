// A stand-in for sigs.k8s.io/iptables-wrappers, which k8s.io/kubernetes
// v1.38's kubelet imports and which the Go module proxy does not serve. Only
// Kubernetes' e2e test binary (e2e/kubetests) links the kubelet package, for
// its constants and helpers; it never runs a kubelet. This package declares
// the names pkg/kubelet uses and reports no iptables support, a case the
// kubelet handles (it logs and skips its iptables rules).
module sigs.k8s.io/iptables-wrappers

go 1.24
