package table

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo"
)

var now = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func convertor() Convertor[*demo.Gadget] {
	return Convertor[*demo.Gadget]{
		Resource: demo.Resource("gadgets"),
		Columns:  []metav1.TableColumnDefinition{NameColumn, {Name: "Owner", Type: "string"}, AgeColumn},
		Cells: func(g *demo.Gadget, now time.Time) []interface{} {
			return []interface{}{g.Name, g.Spec.Owner, Age(g.CreationTimestamp, now)}
		},
		Clock: clocktesting.NewFakePassiveClock(now),
	}
}

func gadget(name string, age time.Duration) demo.Gadget {
	return demo.Gadget{
		ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "5", CreationTimestamp: metav1.NewTime(now.Add(-age))},
		Spec:       demo.GadgetSpec{Owner: "team-" + name},
	}
}

func TestConvertOne(t *testing.T) {
	g := gadget("a", 90*time.Second)
	table, err := convertor().ConvertToTable(context.Background(), &g, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(table.ColumnDefinitions) != 3 {
		t.Errorf("%d columns, want 3", len(table.ColumnDefinitions))
	}
	if table.ResourceVersion != "5" {
		t.Errorf("table resourceVersion %q, want the object's 5", table.ResourceVersion)
	}
	if len(table.Rows) != 1 {
		t.Fatalf("%d rows, want 1", len(table.Rows))
	}
	if diff := cmp.Diff([]interface{}{"a", "team-a", "90s"}, table.Rows[0].Cells); diff != "" {
		t.Errorf("cells (-want +got):\n%s", diff)
	}
	if table.Rows[0].Object.Object != &g {
		t.Error("row does not carry the object")
	}
}

func TestConvertList(t *testing.T) {
	list := &demo.GadgetList{
		ListMeta: metav1.ListMeta{ResourceVersion: "12", Continue: "next", RemainingItemCount: ptr.To[int64](3)},
		Items:    []demo.Gadget{gadget("a", time.Hour), gadget("b", 50*time.Hour)},
	}
	table, err := convertor().ConvertToTable(context.Background(), list, &metav1.TableOptions{NoHeaders: true})
	if err != nil {
		t.Fatal(err)
	}
	if table.ColumnDefinitions != nil {
		t.Errorf("column definitions sent despite NoHeaders: %v", table.ColumnDefinitions)
	}
	if table.ResourceVersion != "12" || table.Continue != "next" || table.RemainingItemCount == nil || *table.RemainingItemCount != 3 {
		t.Errorf("list metadata not carried: %+v", table.ListMeta)
	}
	var got [][]interface{}
	for _, r := range table.Rows {
		got = append(got, r.Cells)
	}
	want := [][]interface{}{{"a", "team-a", "60m"}, {"b", "team-b", "2d2h"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}

	empty, err := convertor().ConvertToTable(context.Background(), &demo.GadgetList{}, nil)
	if err != nil || len(empty.Rows) != 0 || len(empty.ColumnDefinitions) != 3 {
		t.Errorf("empty list: %+v, %v; want headers and no rows", empty, err)
	}
}

func TestConvertWrongKind(t *testing.T) {
	_, err := convertor().ConvertToTable(context.Background(), &demo.Widget{}, nil)
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Code != http.StatusNotAcceptable {
		t.Errorf("got %v, want a 406 status error", err)
	}
}

func TestAge(t *testing.T) {
	if got := Age(metav1.Time{}, now); got != "<unknown>" {
		t.Errorf("Age of a zero time %q, want <unknown>", got)
	}
	if got := Age(metav1.NewTime(now.Add(-3*time.Minute)), now); got != "3m" {
		t.Errorf("Age %q, want 3m", got)
	}
}
