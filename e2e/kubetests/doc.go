// Package kubetests is Kubernetes' own e2e tests of API machinery
// (k8s.io/kubernetes v1.38.0-beta.0 test/e2e/apimachinery), as a test binary of
// their own: `go test -c` builds it, make kube-e2e runs it with ginkgo
// against kube-apiserver with each cache. It is test/e2e's TestMain and
// suite setup, minus the other SIGs' tests and what needs a cloud.
package kubetests
