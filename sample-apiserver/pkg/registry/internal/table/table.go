// Package table turns objects of one kind into the metav1.Table that
// `kubectl get` prints.
package table

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/utils/clock"
)

// ObjectMetaDescriptions are the descriptions of the metadata fields, for
// the Name and Age columns.
var ObjectMetaDescriptions = metav1.ObjectMeta{}.SwaggerDoc()

// NameColumn is the first column of every table.
var NameColumn = metav1.TableColumnDefinition{Name: "Name", Type: "string", Format: "name", Description: ObjectMetaDescriptions["name"]}

// AgeColumn is the last column of every table.
var AgeColumn = metav1.TableColumnDefinition{Name: "Age", Type: "string", Description: ObjectMetaDescriptions["creationTimestamp"]}

// Convertor is a rest.TableConvertor for objects of type T (a pointer to
// an internal type): Columns are the headers, Cells one row's values.
type Convertor[T runtime.Object] struct {
	Resource schema.GroupResource
	Columns  []metav1.TableColumnDefinition
	// Cells returns the row of obj, one value per column. It gets the
	// converter's clock for the Age column.
	Cells func(obj T, now time.Time) []interface{}
	// Clock tells the Age column the time; nil is the real clock.
	Clock clock.PassiveClock
}

// ConvertToTable implements rest.TableConvertor for a single object or a
// list of them.
func (c Convertor[T]) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	var clk clock.PassiveClock = clock.RealClock{}
	if c.Clock != nil {
		clk = c.Clock
	}
	now := clk.Now()
	table := &metav1.Table{}
	row := func(obj runtime.Object) error {
		o, ok := obj.(T)
		if !ok {
			resource := c.Resource
			if info, ok := genericapirequest.RequestInfoFrom(ctx); ok {
				resource = schema.GroupResource{Group: info.APIGroup, Resource: info.Resource}
			}
			return errNotAcceptable{resource: resource, got: obj}
		}
		table.Rows = append(table.Rows, metav1.TableRow{
			Cells:  c.Cells(o, now),
			Object: runtime.RawExtension{Object: obj},
		})
		return nil
	}
	if meta.IsListType(object) {
		if err := meta.EachListItem(object, row); err != nil {
			return nil, err
		}
	} else if err := row(object); err != nil {
		return nil, err
	}
	if m, err := meta.ListAccessor(object); err == nil {
		table.ResourceVersion = m.GetResourceVersion()
		table.Continue = m.GetContinue()
		table.RemainingItemCount = m.GetRemainingItemCount()
	} else if m, err := meta.CommonAccessor(object); err == nil {
		table.ResourceVersion = m.GetResourceVersion()
	}
	if opts, ok := tableOptions.(*metav1.TableOptions); !ok || !opts.NoHeaders {
		table.ColumnDefinitions = c.Columns
	}
	return table, nil
}

// Age is the Age column's value: how long ago created was, as kubectl
// prints it ("5m", "3d").
func Age(created metav1.Time, now time.Time) string {
	if created.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(created.Time))
}

// errNotAcceptable is the 406 a client gets when asking a table of
// something the convertor cannot print, as upstream's default convertor.
type errNotAcceptable struct {
	resource schema.GroupResource
	got      runtime.Object
}

func (e errNotAcceptable) Error() string {
	return fmt.Sprintf("the resource %s cannot convert %T to a Table", e.resource, e.got)
}

func (e errNotAcceptable) Status() metav1.Status {
	return metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusNotAcceptable,
		Reason:  metav1.StatusReason("NotAcceptable"),
		Message: e.Error(),
	}
}
