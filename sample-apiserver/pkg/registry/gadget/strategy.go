// Package gadget is the REST storage of gadgets, the cluster-scoped kind of
// the demo group, and of their status subresource.
package gadget

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
	"sigs.k8s.io/structured-merge-diff/v7/fieldpath"

	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/validation"
	basestrategy "github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/registry/internal/strategy"
)

// GetAttrs returns the labels and the selectable fields of a Gadget:
// metadata.name, spec.owner and status.phase.
func GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	g, ok := obj.(*demo.Gadget)
	if !ok {
		return nil, nil, fmt.Errorf("not a Gadget: %T", obj)
	}
	return labels.Set(g.Labels), SelectableFields(g), nil
}

// SelectableFields returns the fields a field selector can match on.
func SelectableFields(g *demo.Gadget) fields.Set {
	return generic.AddObjectMetaFieldsSet(fields.Set{
		"spec.owner":   g.Spec.Owner,
		"status.phase": g.Status.Phase,
	}, &g.ObjectMeta, false)
}

// Match is the predicate of lists and watches.
func Match(label labels.Selector, field fields.Selector) storage.SelectionPredicate {
	return storage.SelectionPredicate{
		Label:    label,
		Field:    field,
		GetAttrs: GetAttrs,
	}
}

// strategy is the create, update and delete behaviour of gadgets.
type strategy struct {
	basestrategy.Base
}

func newStrategy(typer runtime.ObjectTyper) strategy {
	return strategy{basestrategy.NewBase(typer)}
}

func (strategy) NamespaceScoped() bool { return false }

// GetResetFields: the main resource never writes status.
func (strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return basestrategy.ResetFields("status")
}

// PrepareForCreate drops any status the client sent (status is written
// through the status subresource only) and starts the generation at 1.
func (strategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	g := obj.(*demo.Gadget)
	g.Status = demo.GadgetStatus{}
	g.Generation = 1
}

// PrepareForUpdate keeps the stored status and bumps the generation when
// the spec changes.
func (strategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	g, oldG := obj.(*demo.Gadget), old.(*demo.Gadget)
	g.Status = oldG.Status
	if !apiequality.Semantic.DeepEqual(g.Spec, oldG.Spec) {
		g.Generation = oldG.Generation + 1
	}
}

func (strategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateGadget(obj.(*demo.Gadget))
}

func (strategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateGadgetUpdate(obj.(*demo.Gadget), old.(*demo.Gadget))
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
	g, oldG := obj.(*demo.Gadget), old.(*demo.Gadget)
	g.Spec = oldG.Spec
}

func (statusStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateGadgetStatusUpdate(obj.(*demo.Gadget), old.(*demo.Gadget))
}
