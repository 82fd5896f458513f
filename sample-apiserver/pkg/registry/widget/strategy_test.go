package widget

import (
	"context"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/storage"
	"sigs.k8s.io/structured-merge-diff/v7/fieldpath"

	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/install"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/v1alpha1"
)

func testStrategy() strategy {
	s := runtime.NewScheme()
	install.Install(s)
	return newStrategy(s)
}

func widget() *demo.Widget {
	return &demo.Widget{
		ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: "ns", Labels: map[string]string{"app": "demo"}, Generation: 4, ResourceVersion: "7"},
		Spec:       demo.WidgetSpec{Size: 5, Color: demo.WidgetColorRed, NodeName: "node-a"},
		Status:     demo.WidgetStatus{Phase: demo.WidgetReady, ObservedGeneration: 4},
	}
}

func TestStrategyScope(t *testing.T) {
	s := testStrategy()
	if !s.NamespaceScoped() || !newStatusStrategy(s).NamespaceScoped() {
		t.Error("widgets must be namespaced")
	}
	if s.AllowCreateOnUpdate(context.Background()) {
		t.Error("widgets must not be created by an update")
	}
}

func TestPrepareForCreate(t *testing.T) {
	w := widget()
	testStrategy().PrepareForCreate(context.Background(), w)
	if w.Status != (demo.WidgetStatus{}) {
		t.Errorf("status kept on create: %+v", w.Status)
	}
	if w.Generation != 1 {
		t.Errorf("generation %d on create, want 1", w.Generation)
	}
	if want := widget().Spec; w.Spec != want {
		t.Errorf("spec changed on create: %+v, want %+v", w.Spec, want)
	}
}

func TestPrepareForUpdate(t *testing.T) {
	tests := []struct {
		name           string
		mutate         func(*demo.Widget)
		wantGeneration int64
	}{
		{"status change is dropped", func(w *demo.Widget) { w.Status.Phase = demo.WidgetPending }, 4},
		{"label change keeps the generation", func(w *demo.Widget) { w.Labels["app"] = "other" }, 4},
		{"spec change bumps the generation", func(w *demo.Widget) { w.Spec.Size = 6 }, 5},
		{"spec and status change", func(w *demo.Widget) { w.Spec.NodeName = ""; w.Status = demo.WidgetStatus{} }, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			old, w := widget(), widget()
			tc.mutate(w)
			wantSpec := w.Spec
			testStrategy().PrepareForUpdate(context.Background(), w, old)
			if w.Status != old.Status {
				t.Errorf("status %+v after update, want the stored %+v", w.Status, old.Status)
			}
			if w.Spec != wantSpec {
				t.Errorf("spec %+v after update, want the new %+v", w.Spec, wantSpec)
			}
			if w.Generation != tc.wantGeneration {
				t.Errorf("generation %d, want %d", w.Generation, tc.wantGeneration)
			}
		})
	}
}

func TestStatusPrepareForUpdate(t *testing.T) {
	old, w := widget(), widget()
	w.Spec = demo.WidgetSpec{Size: 999, Color: demo.WidgetColorGreen}
	w.Status = demo.WidgetStatus{Phase: demo.WidgetPending, ObservedGeneration: 3}
	wantStatus := w.Status
	newStatusStrategy(testStrategy()).PrepareForUpdate(context.Background(), w, old)
	if w.Spec != old.Spec {
		t.Errorf("spec %+v after a status update, want the stored %+v", w.Spec, old.Spec)
	}
	if w.Status != wantStatus {
		t.Errorf("status %+v after a status update, want %+v", w.Status, wantStatus)
	}
	if w.Generation != old.Generation {
		t.Errorf("generation %d after a status update, want %d", w.Generation, old.Generation)
	}
}

func TestValidate(t *testing.T) {
	s := testStrategy()
	ctx := context.Background()
	if errs := s.Validate(ctx, widget()); len(errs) != 0 {
		t.Errorf("valid widget rejected: %v", errs)
	}
	bad := widget()
	bad.Spec.Size = 0
	if errs := s.Validate(ctx, bad); len(errs) != 1 || errs[0].Field != "spec.size" {
		t.Errorf("Validate: got %v, want one error on spec.size", errs)
	}
	if errs := s.ValidateUpdate(ctx, bad, widget()); len(errs) != 1 || errs[0].Field != "spec.size" {
		t.Errorf("ValidateUpdate: got %v, want one error on spec.size", errs)
	}
	// The status subresource checks status, not the spec it resets.
	badStatus := widget()
	badStatus.Spec.Size = 0
	badStatus.Status.Phase = "Lost"
	if errs := newStatusStrategy(s).ValidateUpdate(ctx, badStatus, widget()); len(errs) != 1 || errs[0].Field != "status.phase" {
		t.Errorf("status ValidateUpdate: got %v, want one error on status.phase", errs)
	}
}

func TestResetFields(t *testing.T) {
	v := fieldpath.APIVersion("demo.watchkeeper.io/v1alpha1")
	if got := testStrategy().GetResetFields()[v]; got == nil || !got.Has(fieldpath.MakePathOrDie("status")) || got.Has(fieldpath.MakePathOrDie("spec")) {
		t.Errorf("main reset fields %v, want status only", got)
	}
	if got := newStatusStrategy(testStrategy()).GetResetFields()[v]; got == nil || !got.Has(fieldpath.MakePathOrDie("spec")) || got.Has(fieldpath.MakePathOrDie("status")) {
		t.Errorf("status reset fields %v, want spec only", got)
	}
}

func TestGetAttrs(t *testing.T) {
	w := widget()
	ls, fs, err := GetAttrs(w)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(labels.Set{"app": "demo"}, ls); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	want := fields.Set{
		"metadata.name":      "w",
		"metadata.namespace": "ns",
		"spec.nodeName":      "node-a",
		"spec.color":         "red",
		"status.phase":       "Ready",
	}
	if diff := cmp.Diff(want, fs); diff != "" {
		t.Errorf("fields (-want +got):\n%s", diff)
	}
	// Every field GetAttrs publishes is accepted as a field selector by
	// v1alpha1, and the other way round.
	var keys []string
	for k := range fs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	accepted := v1alpha1.WidgetFieldLabels()
	slices.Sort(accepted)
	if diff := cmp.Diff(accepted, keys); diff != "" {
		t.Errorf("GetAttrs fields differ from v1alpha1's field labels (-labels +attrs):\n%s", diff)
	}

	if _, _, err := GetAttrs(&demo.Gadget{}); err == nil {
		t.Error("GetAttrs accepted a Gadget")
	}
}

func TestMatchUsesNodeNameIndex(t *testing.T) {
	sel := fields.ParseSelectorOrDie("spec.nodeName=node-a,status.phase=Ready")
	pred := Match(labels.Everything(), sel)
	if !slices.Contains(pred.IndexFields, NodeNameField) {
		t.Fatalf("IndexFields %v, want %s", pred.IndexFields, NodeNameField)
	}
	ctx := genericapirequest.WithNamespace(context.Background(), "ns")
	got := pred.MatcherIndex(ctx)
	want := []storage.MatchValue{{IndexName: storage.FieldIndex(NodeNameField), Value: "node-a"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("MatcherIndex (-want +got):\n%s", diff)
	}
	if _, ok := (*Indexers())[want[0].IndexName]; !ok {
		t.Errorf("no indexer named %s", want[0].IndexName)
	}

	ok, err := pred.Matches(widget())
	if err != nil || !ok {
		t.Errorf("Matches(node-a, Ready) = %v, %v; want true", ok, err)
	}
	other := widget()
	other.Spec.NodeName = "node-b"
	if ok, _ := pred.Matches(other); ok {
		t.Error("a widget on node-b matched spec.nodeName=node-a")
	}
}

func TestNodeNameIndexAndTrigger(t *testing.T) {
	w := widget()
	if got := NodeNameTriggerFunc(w); got != "node-a" {
		t.Errorf("trigger value %q, want node-a", got)
	}
	if got := NodeNameTriggerFunc(&demo.Gadget{}); got != "" {
		t.Errorf("trigger value of a non-widget %q, want empty", got)
	}
	got, err := NodeNameIndexFunc(w)
	if err != nil || !slices.Equal(got, []string{"node-a"}) {
		t.Errorf("index values %v, %v; want [node-a]", got, err)
	}
	if _, err := NodeNameIndexFunc(&demo.Gadget{}); err == nil {
		t.Error("index func accepted a Gadget")
	}
}
