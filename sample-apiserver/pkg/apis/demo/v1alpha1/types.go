package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// WidgetColor is the color of a Widget.
// +enum
type WidgetColor string

// The colors a Widget may have.
const (
	WidgetColorRed   WidgetColor = "red"
	WidgetColorGreen WidgetColor = "green"
	WidgetColorBlue  WidgetColor = "blue"
)

// WidgetPhase is where a Widget is in its life.
// +enum
type WidgetPhase string

// The phases of a Widget.
const (
	// WidgetPending: the widget is not ready yet.
	WidgetPending WidgetPhase = "Pending"
	// WidgetReady: the widget is ready.
	WidgetReady WidgetPhase = "Ready"
)

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Widget is a namespaced object whose spec may name the node it belongs to.
// Widgets can be selected by the fields metadata.name, metadata.namespace,
// spec.nodeName, spec.color and status.phase.
type Widget struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is what the user asks of the widget.
	// +optional
	Spec WidgetSpec `json:"spec,omitempty"`
	// Status is what the system observed of the widget.
	// +optional
	Status WidgetStatus `json:"status,omitempty"`
}

// WidgetSpec is what the user asks of a Widget.
type WidgetSpec struct {
	// Size of the widget, from 1 to 1000.
	// +required
	Size int32 `json:"size"`
	// Color of the widget: red, green or blue. Defaults to blue.
	// +optional
	Color WidgetColor `json:"color,omitempty"`
	// NodeName is the node the widget belongs to, if any: a DNS-1123
	// subdomain. Selectable with the field selector spec.nodeName.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
}

// WidgetStatus is what the system observed of a Widget.
type WidgetStatus struct {
	// Phase is Pending or Ready.
	// +optional
	Phase WidgetPhase `json:"phase,omitempty"`
	// ObservedGeneration is the metadata.generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// WidgetList is a list of Widgets.
type WidgetList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	// Items are the widgets.
	Items []Widget `json:"items"`
}

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Gadget is a cluster-scoped object owned by a team. Gadgets can be selected
// by the fields metadata.name, spec.owner and status.phase.
type Gadget struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is what the user asks of the gadget.
	// +optional
	Spec GadgetSpec `json:"spec,omitempty"`
	// Status is what the system observed of the gadget.
	// +optional
	Status GadgetStatus `json:"status,omitempty"`
}

// GadgetSpec is what the user asks of a Gadget.
type GadgetSpec struct {
	// Owner of the gadget: a DNS-1123 label.
	// +required
	Owner string `json:"owner"`
	// Replicas is the number of copies wanted, zero or more. Defaults to 1.
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`
}

// GadgetStatus is what the system observed of a Gadget.
type GadgetStatus struct {
	// Phase is a one-word summary of the gadget's state.
	// +optional
	Phase string `json:"phase,omitempty"`
	// ReadyReplicas is the number of copies ready.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// GadgetList is a list of Gadgets.
type GadgetList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	// Items are the gadgets.
	Items []Gadget `json:"items"`
}
