package gadget

import (
	"context"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
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

func gadget() *demo.Gadget {
	return &demo.Gadget{
		ObjectMeta: metav1.ObjectMeta{Name: "g", Labels: map[string]string{"tier": "gold"}, Generation: 2, ResourceVersion: "9"},
		Spec:       demo.GadgetSpec{Owner: "team-a", Replicas: 3},
		Status:     demo.GadgetStatus{Phase: "Running", ReadyReplicas: 2},
	}
}

func TestStrategyScope(t *testing.T) {
	s := testStrategy()
	if s.NamespaceScoped() || newStatusStrategy(s).NamespaceScoped() {
		t.Error("gadgets must be cluster-scoped")
	}
	if s.AllowCreateOnUpdate(context.Background()) {
		t.Error("gadgets must not be created by an update")
	}
}

func TestPrepareForCreate(t *testing.T) {
	g := gadget()
	testStrategy().PrepareForCreate(context.Background(), g)
	if g.Status != (demo.GadgetStatus{}) {
		t.Errorf("status kept on create: %+v", g.Status)
	}
	if g.Generation != 1 {
		t.Errorf("generation %d on create, want 1", g.Generation)
	}
	if want := gadget().Spec; g.Spec != want {
		t.Errorf("spec changed on create: %+v, want %+v", g.Spec, want)
	}
}

func TestPrepareForUpdate(t *testing.T) {
	tests := []struct {
		name           string
		mutate         func(*demo.Gadget)
		wantGeneration int64
	}{
		{"status change is dropped", func(g *demo.Gadget) { g.Status.ReadyReplicas = 3 }, 2},
		{"label change keeps the generation", func(g *demo.Gadget) { g.Labels = nil }, 2},
		{"spec change bumps the generation", func(g *demo.Gadget) { g.Spec.Replicas = 0 }, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			old, g := gadget(), gadget()
			tc.mutate(g)
			wantSpec := g.Spec
			testStrategy().PrepareForUpdate(context.Background(), g, old)
			if g.Status != old.Status {
				t.Errorf("status %+v after update, want the stored %+v", g.Status, old.Status)
			}
			if g.Spec != wantSpec {
				t.Errorf("spec %+v after update, want the new %+v", g.Spec, wantSpec)
			}
			if g.Generation != tc.wantGeneration {
				t.Errorf("generation %d, want %d", g.Generation, tc.wantGeneration)
			}
		})
	}
}

func TestStatusPrepareForUpdate(t *testing.T) {
	old, g := gadget(), gadget()
	g.Spec = demo.GadgetSpec{Owner: "team-b", Replicas: 9}
	g.Status = demo.GadgetStatus{Phase: "Degraded", ReadyReplicas: 1}
	wantStatus := g.Status
	newStatusStrategy(testStrategy()).PrepareForUpdate(context.Background(), g, old)
	if g.Spec != old.Spec {
		t.Errorf("spec %+v after a status update, want the stored %+v", g.Spec, old.Spec)
	}
	if g.Status != wantStatus {
		t.Errorf("status %+v after a status update, want %+v", g.Status, wantStatus)
	}
	if g.Generation != old.Generation {
		t.Errorf("generation %d after a status update, want %d", g.Generation, old.Generation)
	}
}

func TestValidate(t *testing.T) {
	s := testStrategy()
	ctx := context.Background()
	if errs := s.Validate(ctx, gadget()); len(errs) != 0 {
		t.Errorf("valid gadget rejected: %v", errs)
	}
	bad := gadget()
	bad.Spec.Owner = ""
	if errs := s.Validate(ctx, bad); len(errs) != 1 || errs[0].Field != "spec.owner" {
		t.Errorf("Validate: got %v, want one error on spec.owner", errs)
	}
	if errs := s.ValidateUpdate(ctx, bad, gadget()); len(errs) != 1 || errs[0].Field != "spec.owner" {
		t.Errorf("ValidateUpdate: got %v, want one error on spec.owner", errs)
	}
	badStatus := gadget()
	badStatus.Spec.Owner = ""
	badStatus.Status.ReadyReplicas = -1
	if errs := newStatusStrategy(s).ValidateUpdate(ctx, badStatus, gadget()); len(errs) != 1 || errs[0].Field != "status.readyReplicas" {
		t.Errorf("status ValidateUpdate: got %v, want one error on status.readyReplicas", errs)
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
	ls, fs, err := GetAttrs(gadget())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(labels.Set{"tier": "gold"}, ls); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	want := fields.Set{
		"metadata.name": "g",
		"spec.owner":    "team-a",
		"status.phase":  "Running",
	}
	if diff := cmp.Diff(want, fs); diff != "" {
		t.Errorf("fields (-want +got):\n%s", diff)
	}
	var keys []string
	for k := range fs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	accepted := v1alpha1.GadgetFieldLabels()
	slices.Sort(accepted)
	if diff := cmp.Diff(accepted, keys); diff != "" {
		t.Errorf("GetAttrs fields differ from v1alpha1's field labels (-labels +attrs):\n%s", diff)
	}
	if _, _, err := GetAttrs(&demo.Widget{}); err == nil {
		t.Error("GetAttrs accepted a Widget")
	}

	pred := Match(labels.Everything(), fields.ParseSelectorOrDie("spec.owner=team-a"))
	if ok, err := pred.Matches(gadget()); err != nil || !ok {
		t.Errorf("Matches(spec.owner=team-a) = %v, %v; want true", ok, err)
	}
	pred = Match(labels.Everything(), fields.ParseSelectorOrDie("spec.owner=team-b"))
	if ok, _ := pred.Matches(gadget()); ok {
		t.Error("a team-a gadget matched spec.owner=team-b")
	}
}
