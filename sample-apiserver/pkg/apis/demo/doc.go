// +k8s:deepcopy-gen=package
// +groupName=demo.watchkeeper.io

// Package demo is the internal version of the demo.watchkeeper.io API group:
// the types the registry stores and validates. Clients never see them; they
// speak a versioned package such as v1alpha1.
package demo
