// +k8s:openapi-gen=true
// +k8s:deepcopy-gen=package
// +k8s:conversion-gen=github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo
// +k8s:defaulter-gen=TypeMeta
// +groupName=demo.watchkeeper.io
// +k8s:openapi-model-package=com.github.watchkeeper.watchkeeper.sample-apiserver.pkg.apis.demo.v1alpha1

// Package v1alpha1 is the v1alpha1 version of the demo.watchkeeper.io API:
// Widgets (namespaced) and Gadgets (cluster-scoped), each with a status
// subresource.
//
// The OpenAPI model package is the REST-friendly form of this Go package's
// path (as k8s.io/api's io.k8s.api.core.v1): applyconfiguration-gen derives
// the names it looks up from the Go path, so any other name would leave the
// apply configurations without schemas.
package v1alpha1
