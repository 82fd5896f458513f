// Package validation checks objects of the demo.watchkeeper.io group. It
// works on the internal types, after defaulting: what the registry stores.
package validation

import (
	"fmt"
	"slices"

	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo"
)

// The bounds of a Widget's spec.size.
const (
	MinWidgetSize = 1
	MaxWidgetSize = 1000
)

var (
	widgetColors = []demo.WidgetColor{demo.WidgetColorRed, demo.WidgetColorGreen, demo.WidgetColorBlue}
	widgetPhases = []demo.WidgetPhase{demo.WidgetPending, demo.WidgetReady}
)

// ValidateWidget checks a Widget being created.
func ValidateWidget(w *demo.Widget) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMeta(&w.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	allErrs = append(allErrs, ValidateWidgetSpec(&w.Spec, field.NewPath("spec"))...)
	return allErrs
}

// ValidateWidgetUpdate checks an update of a Widget's metadata and spec.
func ValidateWidgetUpdate(w, old *demo.Widget) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&w.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, ValidateWidgetSpec(&w.Spec, field.NewPath("spec"))...)
	return allErrs
}

// ValidateWidgetStatusUpdate checks an update of a Widget's status.
func ValidateWidgetStatusUpdate(w, old *demo.Widget) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&w.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, ValidateWidgetStatus(&w.Status, field.NewPath("status"))...)
	return allErrs
}

// ValidateWidgetSpec: size from 1 to 1000, color red, green or blue,
// nodeName empty or a DNS-1123 subdomain (a node's name).
func ValidateWidgetSpec(spec *demo.WidgetSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if spec.Size < MinWidgetSize || spec.Size > MaxWidgetSize {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("size"), spec.Size, fmt.Sprintf("must be between %d and %d, inclusive", MinWidgetSize, MaxWidgetSize)))
	}
	switch {
	case spec.Color == "":
		allErrs = append(allErrs, field.Required(fldPath.Child("color"), ""))
	case !slices.Contains(widgetColors, spec.Color):
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("color"), spec.Color, widgetColors))
	}
	if spec.NodeName != "" {
		for _, msg := range utilvalidation.IsDNS1123Subdomain(spec.NodeName) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("nodeName"), spec.NodeName, msg))
		}
	}
	return allErrs
}

// ValidateWidgetStatus: phase empty, Pending or Ready; observedGeneration
// not negative.
func ValidateWidgetStatus(status *demo.WidgetStatus, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if status.Phase != "" && !slices.Contains(widgetPhases, status.Phase) {
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("phase"), status.Phase, widgetPhases))
	}
	allErrs = append(allErrs, apimachineryvalidation.ValidateNonnegativeField(status.ObservedGeneration, fldPath.Child("observedGeneration"))...)
	return allErrs
}

// ValidateGadget checks a Gadget being created.
func ValidateGadget(g *demo.Gadget) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMeta(&g.ObjectMeta, false, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	allErrs = append(allErrs, ValidateGadgetSpec(&g.Spec, field.NewPath("spec"))...)
	return allErrs
}

// ValidateGadgetUpdate checks an update of a Gadget's metadata and spec.
func ValidateGadgetUpdate(g, old *demo.Gadget) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&g.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, ValidateGadgetSpec(&g.Spec, field.NewPath("spec"))...)
	return allErrs
}

// ValidateGadgetStatusUpdate checks an update of a Gadget's status.
func ValidateGadgetStatusUpdate(g, old *demo.Gadget) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&g.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, ValidateGadgetStatus(&g.Status, field.NewPath("status"))...)
	return allErrs
}

// ValidateGadgetSpec: owner a DNS-1123 label, replicas not negative.
func ValidateGadgetSpec(spec *demo.GadgetSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if spec.Owner == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("owner"), ""))
	} else {
		for _, msg := range utilvalidation.IsDNS1123Label(spec.Owner) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("owner"), spec.Owner, msg))
		}
	}
	allErrs = append(allErrs, apimachineryvalidation.ValidateNonnegativeField(int64(spec.Replicas), fldPath.Child("replicas"))...)
	return allErrs
}

// ValidateGadgetStatus: readyReplicas not negative.
func ValidateGadgetStatus(status *demo.GadgetStatus, fldPath *field.Path) field.ErrorList {
	return apimachineryvalidation.ValidateNonnegativeField(int64(status.ReadyReplicas), fldPath.Child("readyReplicas"))
}
