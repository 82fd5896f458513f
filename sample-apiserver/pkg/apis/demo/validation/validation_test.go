package validation

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo"
)

// wantErr is one expected error: its type and field path.
type wantErr struct {
	typ   field.ErrorType
	field string
}

func checkErrs(t *testing.T, got field.ErrorList, want []wantErr) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d errors, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i].Type != w.typ || got[i].Field != w.field {
			t.Errorf("error %d: got %s %s (%v), want %s %s", i, got[i].Type, got[i].Field, got[i], w.typ, w.field)
		}
	}
}

func validWidget() *demo.Widget {
	return &demo.Widget{
		ObjectMeta: metav1.ObjectMeta{Name: "w1", Namespace: "default", ResourceVersion: "1"},
		Spec:       demo.WidgetSpec{Size: 10, Color: demo.WidgetColorBlue, NodeName: "node-1.example.com"},
		Status:     demo.WidgetStatus{Phase: demo.WidgetReady, ObservedGeneration: 1},
	}
}

func validGadget() *demo.Gadget {
	return &demo.Gadget{
		ObjectMeta: metav1.ObjectMeta{Name: "g1", ResourceVersion: "1"},
		Spec:       demo.GadgetSpec{Owner: "team-a", Replicas: 1},
		Status:     demo.GadgetStatus{Phase: "Running", ReadyReplicas: 1},
	}
}

func TestValidateWidget(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*demo.Widget)
		want   []wantErr
	}{
		{name: "valid", mutate: func(*demo.Widget) {}},
		{name: "valid without node", mutate: func(w *demo.Widget) { w.Spec.NodeName = "" }},
		{name: "size 1", mutate: func(w *demo.Widget) { w.Spec.Size = 1 }},
		{name: "size 1000", mutate: func(w *demo.Widget) { w.Spec.Size = 1000 }},
		{name: "each color", mutate: func(w *demo.Widget) { w.Spec.Color = demo.WidgetColorRed }},
		{name: "green", mutate: func(w *demo.Widget) { w.Spec.Color = demo.WidgetColorGreen }},
		{
			name:   "size 0",
			mutate: func(w *demo.Widget) { w.Spec.Size = 0 },
			want:   []wantErr{{field.ErrorTypeInvalid, "spec.size"}},
		},
		{
			name:   "size negative",
			mutate: func(w *demo.Widget) { w.Spec.Size = -5 },
			want:   []wantErr{{field.ErrorTypeInvalid, "spec.size"}},
		},
		{
			name:   "size 1001",
			mutate: func(w *demo.Widget) { w.Spec.Size = 1001 },
			want:   []wantErr{{field.ErrorTypeInvalid, "spec.size"}},
		},
		{
			name:   "color missing",
			mutate: func(w *demo.Widget) { w.Spec.Color = "" },
			want:   []wantErr{{field.ErrorTypeRequired, "spec.color"}},
		},
		{
			name:   "color unknown",
			mutate: func(w *demo.Widget) { w.Spec.Color = "purple" },
			want:   []wantErr{{field.ErrorTypeNotSupported, "spec.color"}},
		},
		{
			name:   "color case matters",
			mutate: func(w *demo.Widget) { w.Spec.Color = "Blue" },
			want:   []wantErr{{field.ErrorTypeNotSupported, "spec.color"}},
		},
		{
			name:   "nodeName not a DNS subdomain",
			mutate: func(w *demo.Widget) { w.Spec.NodeName = "Node_1" },
			want:   []wantErr{{field.ErrorTypeInvalid, "spec.nodeName"}},
		},
		{
			name:   "nodeName too long",
			mutate: func(w *demo.Widget) { w.Spec.NodeName = strings.Repeat("a", 254) },
			want:   []wantErr{{field.ErrorTypeInvalid, "spec.nodeName"}},
		},
		{
			name:   "namespace missing",
			mutate: func(w *demo.Widget) { w.Namespace = "" },
			want:   []wantErr{{field.ErrorTypeRequired, "metadata.namespace"}},
		},
		{
			name:   "name invalid",
			mutate: func(w *demo.Widget) { w.Name = "Not_Valid" },
			want:   []wantErr{{field.ErrorTypeInvalid, "metadata.name"}},
		},
		{
			name:   "several at once",
			mutate: func(w *demo.Widget) { w.Spec.Size = 0; w.Spec.Color = "pink" },
			want:   []wantErr{{field.ErrorTypeInvalid, "spec.size"}, {field.ErrorTypeNotSupported, "spec.color"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := validWidget()
			tc.mutate(w)
			checkErrs(t, ValidateWidget(w), tc.want)
			// An update runs the same spec rules.
			old := validWidget()
			w.Name, w.Namespace = old.Name, old.Namespace
			var specOnly []wantErr
			for _, e := range tc.want {
				if strings.HasPrefix(e.field, "spec.") {
					specOnly = append(specOnly, e)
				}
			}
			checkErrs(t, ValidateWidgetUpdate(w, old), specOnly)
		})
	}
}

func TestValidateWidgetStatusUpdate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*demo.Widget)
		want   []wantErr
	}{
		{name: "valid", mutate: func(*demo.Widget) {}},
		{name: "phase empty", mutate: func(w *demo.Widget) { w.Status.Phase = "" }},
		{name: "pending", mutate: func(w *demo.Widget) { w.Status.Phase = demo.WidgetPending }},
		{
			name:   "phase unknown",
			mutate: func(w *demo.Widget) { w.Status.Phase = "Running" },
			want:   []wantErr{{field.ErrorTypeNotSupported, "status.phase"}},
		},
		{
			name:   "observedGeneration negative",
			mutate: func(w *demo.Widget) { w.Status.ObservedGeneration = -1 },
			want:   []wantErr{{field.ErrorTypeInvalid, "status.observedGeneration"}},
		},
		{
			name:   "name changed",
			mutate: func(w *demo.Widget) { w.Name = "w2" },
			want:   []wantErr{{field.ErrorTypeInvalid, "metadata.name"}},
		},
		{
			// The status strategy resets the spec; validating it here would
			// let a bad stored spec block every status write.
			name:   "spec not checked",
			mutate: func(w *demo.Widget) { w.Spec.Size = 0 },
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := validWidget()
			tc.mutate(w)
			checkErrs(t, ValidateWidgetStatusUpdate(w, validWidget()), tc.want)
		})
	}
}

func TestValidateGadget(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*demo.Gadget)
		want   []wantErr
	}{
		{name: "valid", mutate: func(*demo.Gadget) {}},
		{name: "zero replicas", mutate: func(g *demo.Gadget) { g.Spec.Replicas = 0 }},
		{name: "one-letter owner", mutate: func(g *demo.Gadget) { g.Spec.Owner = "a" }},
		{
			name:   "owner missing",
			mutate: func(g *demo.Gadget) { g.Spec.Owner = "" },
			want:   []wantErr{{field.ErrorTypeRequired, "spec.owner"}},
		},
		{
			name:   "owner with a dot is not a label",
			mutate: func(g *demo.Gadget) { g.Spec.Owner = "team.a" },
			want:   []wantErr{{field.ErrorTypeInvalid, "spec.owner"}},
		},
		{
			name:   "owner upper case",
			mutate: func(g *demo.Gadget) { g.Spec.Owner = "TeamA" },
			want:   []wantErr{{field.ErrorTypeInvalid, "spec.owner"}},
		},
		{
			name:   "owner too long",
			mutate: func(g *demo.Gadget) { g.Spec.Owner = strings.Repeat("a", 64) },
			want:   []wantErr{{field.ErrorTypeInvalid, "spec.owner"}},
		},
		{
			name:   "replicas negative",
			mutate: func(g *demo.Gadget) { g.Spec.Replicas = -1 },
			want:   []wantErr{{field.ErrorTypeInvalid, "spec.replicas"}},
		},
		{
			name:   "namespace set on a cluster-scoped object",
			mutate: func(g *demo.Gadget) { g.Namespace = "default" },
			want:   []wantErr{{field.ErrorTypeForbidden, "metadata.namespace"}},
		},
		{
			name:   "name missing",
			mutate: func(g *demo.Gadget) { g.Name = "" },
			want:   []wantErr{{field.ErrorTypeRequired, "metadata.name"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := validGadget()
			tc.mutate(g)
			checkErrs(t, ValidateGadget(g), tc.want)
			old := validGadget()
			g.Name, g.Namespace = old.Name, old.Namespace
			var specOnly []wantErr
			for _, e := range tc.want {
				if strings.HasPrefix(e.field, "spec.") {
					specOnly = append(specOnly, e)
				}
			}
			checkErrs(t, ValidateGadgetUpdate(g, old), specOnly)
		})
	}
}

func TestValidateGadgetStatusUpdate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*demo.Gadget)
		want   []wantErr
	}{
		{name: "valid", mutate: func(*demo.Gadget) {}},
		{name: "any phase", mutate: func(g *demo.Gadget) { g.Status.Phase = "Degraded" }},
		{
			name:   "readyReplicas negative",
			mutate: func(g *demo.Gadget) { g.Status.ReadyReplicas = -1 },
			want:   []wantErr{{field.ErrorTypeInvalid, "status.readyReplicas"}},
		},
		{
			name:   "resourceVersion missing",
			mutate: func(g *demo.Gadget) { g.ResourceVersion = "" },
			want:   []wantErr{{field.ErrorTypeInvalid, "metadata.resourceVersion"}},
		},
		{
			name:   "spec not checked",
			mutate: func(g *demo.Gadget) { g.Spec.Owner = "" },
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := validGadget()
			tc.mutate(g)
			checkErrs(t, ValidateGadgetStatusUpdate(g, validGadget()), tc.want)
		})
	}
}
