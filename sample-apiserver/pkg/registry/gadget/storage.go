package gadget

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"

	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/registry/internal/status"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/registry/internal/table"
)

// REST is the storage of gadgets.
type REST struct {
	*genericregistry.Store
}

// NewREST returns the storage of gadgets and of their status subresource,
// on the storage optsGetter hands out for "gadgets". The status storage
// shares the gadgets' store: Destroy the REST, not the status.
func NewREST(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter) (*REST, *status.REST, error) {
	s := newStrategy(scheme)
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &demo.Gadget{} },
		NewListFunc:               func() runtime.Object { return &demo.GadgetList{} },
		PredicateFunc:             Match,
		DefaultQualifiedResource:  demo.Resource("gadgets"),
		SingularQualifiedResource: demo.Resource("gadget"),

		CreateStrategy:      s,
		UpdateStrategy:      s,
		DeleteStrategy:      s,
		ResetFieldsStrategy: s,

		TableConvertor: tableConvertor,
	}
	options := &generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: GetAttrs}
	if err := store.CompleteWithOptions(options); err != nil {
		return nil, nil, fmt.Errorf("gadgets: %w", err)
	}
	return &REST{store}, status.NewREST(store, newStatusStrategy(s)), nil
}

var tableConvertor = table.Convertor[*demo.Gadget]{
	Resource: demo.Resource("gadgets"),
	Columns: []metav1.TableColumnDefinition{
		table.NameColumn,
		{Name: "Owner", Type: "string", Description: "Owner of the gadget."},
		{Name: "Replicas", Type: "integer", Description: "Number of copies wanted."},
		{Name: "Ready", Type: "integer", Description: "Number of copies ready."},
		table.AgeColumn,
	},
	Cells: func(g *demo.Gadget, now time.Time) []interface{} {
		return []interface{}{g.Name, g.Spec.Owner, int64(g.Spec.Replicas), int64(g.Status.ReadyReplicas), table.Age(g.CreationTimestamp, now)}
	},
}
