package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime"
)

func addDefaultingFuncs(scheme *runtime.Scheme) error {
	return RegisterDefaults(scheme)
}

// SetDefaults_WidgetSpec colors a widget blue unless told otherwise.
func SetDefaults_WidgetSpec(obj *WidgetSpec) {
	if obj.Color == "" {
		obj.Color = WidgetColorBlue
	}
}

// SetDefaults_GadgetSpec asks for one replica when replicas is unset.
// An explicit 0 stays 0.
func SetDefaults_GadgetSpec(obj *GadgetSpec) {
	if obj.Replicas == nil {
		one := int32(1)
		obj.Replicas = &one
	}
}
