package v1alpha1_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/utils/ptr"

	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/install"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/v1alpha1"
)

func newScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	install.Install(s)
	return s
}

func TestWidgetDefaults(t *testing.T) {
	tests := []struct {
		name  string
		color v1alpha1.WidgetColor
		want  v1alpha1.WidgetColor
	}{
		{"unset is blue", "", v1alpha1.WidgetColorBlue},
		{"red stays red", v1alpha1.WidgetColorRed, v1alpha1.WidgetColorRed},
		{"green stays green", v1alpha1.WidgetColorGreen, v1alpha1.WidgetColorGreen},
		{"an invalid color is left for validation", "purple", "purple"},
	}
	s := newScheme(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := &v1alpha1.Widget{Spec: v1alpha1.WidgetSpec{Size: 3, Color: tc.color}}
			s.Default(w)
			if w.Spec.Color != tc.want {
				t.Errorf("color %q defaulted to %q, want %q", tc.color, w.Spec.Color, tc.want)
			}
			if w.Spec.Size != 3 {
				t.Errorf("size changed to %d", w.Spec.Size)
			}
			list := &v1alpha1.WidgetList{Items: []v1alpha1.Widget{{Spec: v1alpha1.WidgetSpec{Color: tc.color}}}}
			s.Default(list)
			if got := list.Items[0].Spec.Color; got != tc.want {
				t.Errorf("list item color %q defaulted to %q, want %q", tc.color, got, tc.want)
			}
		})
	}
}

func TestGadgetDefaults(t *testing.T) {
	tests := []struct {
		name     string
		replicas *int32
		want     int32
	}{
		{"unset is one", nil, 1},
		{"zero stays zero", ptr.To[int32](0), 0},
		{"five stays five", ptr.To[int32](5), 5},
	}
	s := newScheme(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := &v1alpha1.Gadget{Spec: v1alpha1.GadgetSpec{Owner: "team-a", Replicas: tc.replicas}}
			s.Default(g)
			if g.Spec.Replicas == nil || *g.Spec.Replicas != tc.want {
				t.Errorf("replicas defaulted to %v, want %d", g.Spec.Replicas, tc.want)
			}
			list := &v1alpha1.GadgetList{Items: []v1alpha1.Gadget{{Spec: v1alpha1.GadgetSpec{Replicas: tc.replicas}}}}
			s.Default(list)
			if r := list.Items[0].Spec.Replicas; r == nil || *r != tc.want {
				t.Errorf("list item replicas defaulted to %v, want %d", r, tc.want)
			}
		})
	}
}

// Decoding a request body into the internal version applies the defaults,
// as the apiserver does.
func TestDecodeAppliesDefaults(t *testing.T) {
	s := newScheme(t)
	codecs := serializer.NewCodecFactory(s)
	decoder := codecs.UniversalDecoder(demo.SchemeGroupVersion)

	obj, err := runtime.Decode(decoder, []byte(`{"apiVersion":"demo.watchkeeper.io/v1alpha1","kind":"Widget","metadata":{"name":"w"},"spec":{"size":2}}`))
	if err != nil {
		t.Fatal(err)
	}
	w, ok := obj.(*demo.Widget)
	if !ok {
		t.Fatalf("decoded %T, want *demo.Widget", obj)
	}
	if w.Spec.Color != demo.WidgetColorBlue || w.Spec.Size != 2 {
		t.Errorf("decoded spec %+v, want size 2 and color blue", w.Spec)
	}

	obj, err = runtime.Decode(decoder, []byte(`{"apiVersion":"demo.watchkeeper.io/v1alpha1","kind":"Gadget","metadata":{"name":"g"},"spec":{"owner":"team-a"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if g := obj.(*demo.Gadget); g.Spec.Replicas != 1 {
		t.Errorf("decoded replicas %d, want 1", g.Spec.Replicas)
	}
	obj, err = runtime.Decode(decoder, []byte(`{"apiVersion":"demo.watchkeeper.io/v1alpha1","kind":"Gadget","metadata":{"name":"g"},"spec":{"owner":"team-a","replicas":0}}`))
	if err != nil {
		t.Fatal(err)
	}
	if g := obj.(*demo.Gadget); g.Spec.Replicas != 0 {
		t.Errorf("decoded explicit replicas 0 as %d", g.Spec.Replicas)
	}
}

func TestFieldLabelConversion(t *testing.T) {
	s := newScheme(t)
	tests := []struct {
		kind  string
		label string
		ok    bool
	}{
		{"Widget", "metadata.name", true},
		{"Widget", "metadata.namespace", true},
		{"Widget", "spec.nodeName", true},
		{"Widget", "spec.color", true},
		{"Widget", "status.phase", true},
		{"Widget", "spec.size", false},
		{"Widget", "spec.owner", false},
		{"Gadget", "metadata.name", true},
		{"Gadget", "spec.owner", true},
		{"Gadget", "status.phase", true},
		{"Gadget", "metadata.namespace", false},
		{"Gadget", "spec.nodeName", false},
		{"Gadget", "spec.replicas", false},
	}
	for _, tc := range tests {
		t.Run(tc.kind+"/"+tc.label, func(t *testing.T) {
			label, value, err := s.ConvertFieldLabel(v1alpha1.SchemeGroupVersion.WithKind(tc.kind), tc.label, "x")
			if tc.ok {
				if err != nil || label != tc.label || value != "x" {
					t.Errorf("got (%q, %q, %v), want (%q, \"x\", nil)", label, value, err, tc.label)
				}
				return
			}
			if err == nil {
				t.Errorf("field label %s accepted for %s, want an error", tc.label, tc.kind)
			}
		})
	}
}
