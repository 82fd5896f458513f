// Package strategy holds what the demo kinds' REST strategies share, so each
// kind's strategy says only what is particular to it.
package strategy

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/structured-merge-diff/v7/fieldpath"

	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/v1alpha1"
)

// Base is embedded by the kinds' strategies: the scheme's typer, generated
// names, no warnings, no canonical form, no create on update, and updates
// without a resourceVersion allowed (as for pods).
type Base struct {
	runtime.ObjectTyper
	names.NameGenerator
}

// NewBase returns a Base over typer.
func NewBase(typer runtime.ObjectTyper) Base { return Base{typer, names.SimpleNameGenerator} }

func (Base) WarningsOnCreate(context.Context, runtime.Object) []string                 { return nil }
func (Base) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string { return nil }
func (Base) Canonicalize(runtime.Object)                                               {}
func (Base) AllowCreateOnUpdate(context.Context) bool                                  { return false }
func (Base) AllowUnconditionalUpdate(context.Context) bool                             { return true }

// ResetFields are the fields server-side apply leaves alone in v1alpha1: a
// top-level part of the object ("status" for the main resource, "spec" for
// the status subresource).
func ResetFields(part string) map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		fieldpath.APIVersion(v1alpha1.SchemeGroupVersion.String()): fieldpath.NewSet(fieldpath.MakePathOrDie(part)),
	}
}
