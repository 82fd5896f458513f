package demo

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// WidgetColor is the color of a Widget.
type WidgetColor string

// The colors a Widget may have.
const (
	WidgetColorRed   WidgetColor = "red"
	WidgetColorGreen WidgetColor = "green"
	WidgetColorBlue  WidgetColor = "blue"
)

// WidgetPhase is where a Widget is in its life.
type WidgetPhase string

// The phases of a Widget.
const (
	WidgetPending WidgetPhase = "Pending"
	WidgetReady   WidgetPhase = "Ready"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Widget is a namespaced object whose spec may name the node it belongs to.
type Widget struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	Spec   WidgetSpec
	Status WidgetStatus
}

// WidgetSpec is what the user asks of a Widget.
type WidgetSpec struct {
	// Size is between 1 and 1000.
	Size int32
	// Color is red, green or blue.
	Color WidgetColor
	// NodeName is the node the widget belongs to, if any.
	NodeName string
}

// WidgetStatus is what the system observed of a Widget.
type WidgetStatus struct {
	Phase              WidgetPhase
	ObservedGeneration int64
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// WidgetList is a list of Widgets.
type WidgetList struct {
	metav1.TypeMeta
	metav1.ListMeta

	Items []Widget
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Gadget is a cluster-scoped object owned by a team.
type Gadget struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	Spec   GadgetSpec
	Status GadgetStatus
}

// GadgetSpec is what the user asks of a Gadget.
type GadgetSpec struct {
	// Owner is a DNS-1123 label.
	Owner string
	// Replicas is zero or more; the versioned APIs default it to 1.
	Replicas int32
}

// GadgetStatus is what the system observed of a Gadget.
type GadgetStatus struct {
	Phase         string
	ReadyReplicas int32
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// GadgetList is a list of Gadgets.
type GadgetList struct {
	metav1.TypeMeta
	metav1.ListMeta

	Items []Gadget
}
