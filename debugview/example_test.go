package debugview_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/watchkeeper/watchkeeper/debugview"
	"github.com/watchkeeper/watchkeeper/decorator"
)

// Handler serves a decorator's caches, as HTML for a person or JSON for a
// tool; a server mounts it behind its own authentication.
func ExampleHandler() {
	d, err := decorator.NewDecorator(nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	h := debugview.Handler(d)
	for _, target := range []string{"/debug/watchkeeper", "/debug/watchkeeper?format=json"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
		fmt.Println(rec.Code, rec.Header().Get("Content-Type"))
	}
	// Output:
	// 200 text/html; charset=utf-8
	// 200 application/json
}
