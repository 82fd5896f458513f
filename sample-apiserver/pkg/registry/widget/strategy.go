// Package widget is the REST storage of widgets, the namespaced kind of the
// demo group, and of their status subresource.
package widget

import (
	"context"
	"fmt"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/structured-merge-diff/v7/fieldpath"

	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/validation"
	basestrategy "github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/registry/internal/strategy"
)

// NodeNameField is the field by which watchers and lists of widgets are
// indexed, as kubelets watch pods by spec.nodeName.
const NodeNameField = "spec.nodeName"

// GetAttrs returns the labels and the selectable fields of a Widget:
// metadata.name, metadata.namespace, spec.nodeName, spec.color and
// status.phase.
func GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	w, ok := obj.(*demo.Widget)
	if !ok {
		return nil, nil, fmt.Errorf("not a Widget: %T", obj)
	}
	return labels.Set(w.Labels), SelectableFields(w), nil
}

// SelectableFields returns the fields a field selector can match on.
func SelectableFields(w *demo.Widget) fields.Set {
	return generic.AddObjectMetaFieldsSet(fields.Set{
		NodeNameField:  w.Spec.NodeName,
		"spec.color":   string(w.Spec.Color),
		"status.phase": string(w.Status.Phase),
	}, &w.ObjectMeta, true)
}

// Match is the predicate of lists and watches. It names spec.nodeName as
// an index field, so a selector that pins it is served from the cache's
// index (lists) and trigger (watches) instead of a scan of every widget.
func Match(label labels.Selector, field fields.Selector) storage.SelectionPredicate {
	return storage.SelectionPredicate{
		Label:       label,
		Field:       field,
		GetAttrs:    GetAttrs,
		IndexFields: []string{NodeNameField},
	}
}

// NodeNameTriggerFunc is the value of the cache's trigger for a widget:
// its spec.nodeName.
func NodeNameTriggerFunc(obj runtime.Object) string {
	if w, ok := obj.(*demo.Widget); ok {
		return w.Spec.NodeName
	}
	return ""
}

// NodeNameIndexFunc files a widget in the cache's index by spec.nodeName.
func NodeNameIndexFunc(obj interface{}) ([]string, error) {
	w, ok := obj.(*demo.Widget)
	if !ok {
		return nil, fmt.Errorf("not a Widget: %T", obj)
	}
	return []string{w.Spec.NodeName}, nil
}

// Indexers are the cache indexes of widgets.
func Indexers() *cache.Indexers {
	return &cache.Indexers{storage.FieldIndex(NodeNameField): NodeNameIndexFunc}
}

// strategy is the create, update and delete behaviour of widgets.
type strategy struct {
	basestrategy.Base
}

func newStrategy(typer runtime.ObjectTyper) strategy {
	return strategy{basestrategy.NewBase(typer)}
}

func (strategy) NamespaceScoped() bool { return true }

// GetResetFields: the main resource never writes status.
func (strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return basestrategy.ResetFields("status")
}

// PrepareForCreate drops any status the client sent (status is written
// through the status subresource only) and starts the generation at 1.
func (strategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	w := obj.(*demo.Widget)
	w.Status = demo.WidgetStatus{}
	w.Generation = 1
}

// PrepareForUpdate keeps the stored status and bumps the generation when
// the spec changes.
func (strategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	w, oldW := obj.(*demo.Widget), old.(*demo.Widget)
	w.Status = oldW.Status
	if !apiequality.Semantic.DeepEqual(w.Spec, oldW.Spec) {
		w.Generation = oldW.Generation + 1
	}
}

func (strategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateWidget(obj.(*demo.Widget))
}

func (strategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateWidgetUpdate(obj.(*demo.Widget), old.(*demo.Widget))
}

// statusStrategy is the update behaviour of the status subresource.
type statusStrategy struct {
	strategy
}

func newStatusStrategy(s strategy) statusStrategy {
	return statusStrategy{s}
}

// GetResetFields: the status subresource never writes spec.
func (statusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return basestrategy.ResetFields("spec")
}

// PrepareForUpdate keeps the stored spec: a status update changes status
// (and metadata) only, so the generation stays.
func (statusStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	w, oldW := obj.(*demo.Widget), old.(*demo.Widget)
	w.Spec = oldW.Spec
}

func (statusStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateWidgetStatusUpdate(obj.(*demo.Widget), old.(*demo.Widget))
}
