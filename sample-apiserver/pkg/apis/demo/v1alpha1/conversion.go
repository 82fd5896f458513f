package v1alpha1

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
)

// The fields a field selector may name, per kind. The registry's GetAttrs
// publishes the same set, so a selector accepted here always has a value to
// match against.
var (
	widgetFieldLabels = []string{"metadata.name", "metadata.namespace", "spec.nodeName", "spec.color", "status.phase"}
	gadgetFieldLabels = []string{"metadata.name", "spec.owner", "status.phase"}
)

// WidgetFieldLabels returns the fields by which Widgets can be selected.
func WidgetFieldLabels() []string { return append([]string(nil), widgetFieldLabels...) }

// GadgetFieldLabels returns the fields by which Gadgets can be selected.
func GadgetFieldLabels() []string { return append([]string(nil), gadgetFieldLabels...) }

func addFieldLabelConversionFuncs(scheme *runtime.Scheme) error {
	if err := scheme.AddFieldLabelConversionFunc(SchemeGroupVersion.WithKind("Widget"), fieldLabelConversion("Widget", widgetFieldLabels)); err != nil {
		return err
	}
	return scheme.AddFieldLabelConversionFunc(SchemeGroupVersion.WithKind("Gadget"), fieldLabelConversion("Gadget", gadgetFieldLabels))
}

// fieldLabelConversion accepts the listed labels unchanged (v1alpha1 and
// the internal version name fields alike) and rejects every other.
func fieldLabelConversion(kind string, supported []string) runtime.FieldLabelConversionFunc {
	return func(label, value string) (string, string, error) {
		for _, l := range supported {
			if l == label {
				return label, value, nil
			}
		}
		return "", "", fmt.Errorf("field label not supported for %s: %s", kind, label)
	}
}
