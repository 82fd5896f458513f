// Package status serves the status subresource of a kind from a copy of its
// main store that carries the status update strategy.
package status

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"sigs.k8s.io/structured-merge-diff/v7/fieldpath"
)

// REST is the storage of a status subresource: get, update and patch.
type REST struct {
	store *genericregistry.Store
}

var (
	_ rest.Patcher             = &REST{}
	_ rest.TableConvertor      = &REST{}
	_ rest.ResetFieldsStrategy = &REST{}
	_ rest.Storage             = &REST{}
)

// NewREST serves the status of the kind stored by main. It copies main and
// swaps in strategy for updates, so the copy shares main's storage (and
// watch cache): it must be called after main.CompleteWithOptions.
func NewREST(main *genericregistry.Store, strategy rest.UpdateResetFieldsStrategy) *REST {
	store := *main
	store.UpdateStrategy = strategy
	store.ResetFieldsStrategy = strategy
	return &REST{store: &store}
}

// New returns an empty object of the kind.
func (r *REST) New() runtime.Object {
	return r.store.New()
}

// Destroy does nothing: the storage belongs to the main resource, whose
// Destroy releases it.
func (r *REST) Destroy() {}

// Get retrieves the object, for the status subresource's GET and patches.
func (r *REST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	return r.store.Get(ctx, name, options)
}

// Update changes the status of an object. It never creates one.
func (r *REST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	return r.store.Update(ctx, name, objInfo, createValidation, updateValidation, false, options)
}

// GetResetFields returns the fields a status update leaves as they were.
func (r *REST) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return r.store.GetResetFields()
}

// ConvertToTable prints the object as the main resource does.
func (r *REST) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return r.store.ConvertToTable(ctx, object, tableOptions)
}
