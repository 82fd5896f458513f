package storagebench

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/client-go/tools/cache"
)

// customResources is a custom resource held as apiextensions-apiserver
// holds one: Unstructured objects, stored as JSON, selected by labels and
// metadata.name and metadata.namespace, no trigger, no index.
var customResources = resource{
	codec:       unstructured.UnstructuredJSONScheme,
	newFunc:     func() runtime.Object { return &unstructured.Unstructured{} },
	newListFunc: func() runtime.Object { return &unstructured.UnstructuredList{} },
	attrs:       customResourceAttrs,
	triggers:    func() storage.IndexerFuncs { return nil },
	indexers:    func() *cache.Indexers { return nil },
}

func customResourceAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, nil, fmt.Errorf("not an unstructured object: %T", obj)
	}
	return u.GetLabels(), fields.Set{"metadata.name": u.GetName(), "metadata.namespace": u.GetNamespace()}, nil
}

// customResource is pod's content as a bench.watchkeeper.io/v1 Replica.
func customResource(pod *corev1.Pod) *unstructured.Unstructured {
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pod)
	if err != nil {
		panic(err) // a typed pod always converts
	}
	u := &unstructured.Unstructured{Object: content}
	u.SetAPIVersion("bench.watchkeeper.io/v1")
	u.SetKind("Replica")
	return u
}
