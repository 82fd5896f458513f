package widget

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/storage"

	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/registry/internal/status"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/registry/internal/table"
)

// REST is the storage of widgets.
type REST struct {
	*genericregistry.Store
}

// NewREST returns the storage of widgets and of their status subresource,
// on the storage optsGetter hands out for "widgets". The status storage
// shares the widgets' store: Destroy the REST, not the status.
func NewREST(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter) (*REST, *status.REST, error) {
	s := newStrategy(scheme)
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &demo.Widget{} },
		NewListFunc:               func() runtime.Object { return &demo.WidgetList{} },
		PredicateFunc:             Match,
		DefaultQualifiedResource:  demo.Resource("widgets"),
		SingularQualifiedResource: demo.Resource("widget"),

		CreateStrategy:      s,
		UpdateStrategy:      s,
		DeleteStrategy:      s,
		ResetFieldsStrategy: s,

		TableConvertor: tableConvertor,
	}
	options := &generic.StoreOptions{
		RESTOptions: optsGetter,
		AttrFunc:    GetAttrs,
		TriggerFunc: storage.IndexerFuncs{NodeNameField: NodeNameTriggerFunc},
		Indexers:    Indexers(),
	}
	if err := store.CompleteWithOptions(options); err != nil {
		return nil, nil, fmt.Errorf("widgets: %w", err)
	}
	return &REST{store}, status.NewREST(store, newStatusStrategy(s)), nil
}

var tableConvertor = table.Convertor[*demo.Widget]{
	Resource: demo.Resource("widgets"),
	Columns: []metav1.TableColumnDefinition{
		table.NameColumn,
		{Name: "Size", Type: "integer", Description: "Size of the widget, from 1 to 1000."},
		{Name: "Color", Type: "string", Description: "Color of the widget: red, green or blue."},
		{Name: "Phase", Type: "string", Description: "Phase is Pending or Ready."},
		table.AgeColumn,
	},
	Cells: func(w *demo.Widget, now time.Time) []interface{} {
		return []interface{}{w.Name, int64(w.Spec.Size), string(w.Spec.Color), string(w.Status.Phase), table.Age(w.CreationTimestamp, now)}
	},
}
