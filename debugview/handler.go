// Package debugview serves a view into watchkeeper's watch caches: per
// resource, watchers by WatchList state, how many watchers are filed in each
// slot of the next bookmark period, the history's span and age, the cache's
// RV against etcd's and the last tick's duration. JSON for tools; for
// people, an HTML page read at a glance, the calendar drawn as a labelled
// chart (inline SVG, no scripts), optionally refreshing itself.
//
// It is for the operator asking why a watch got no bookmark or a resume got
// 410, in a cache's terms. [Handler] reads each [cacher.Cacher] through
// [cacher.Cacher.Inspect], which holds the cache's read lock only while it
// copies, not while it asks etcd for its revision: a page changes nothing
// and holds no cache's writes up for an etcd round trip. The
// caches come from a [Source], normally the
// [*github.com/watchkeeper/watchkeeper/decorator.Decorator] that made them;
// the watcher states are those of [watchlist.State].
//
// Mount it behind the server's authentication and authorization, e.g. on
// the generic apiserver's NonGoRestfulMux:
//
//	d, err := decorator.NewDecorator(opts)
//	// ... d.Decorate as the server's storage decorator ...
//	mux.Handle("/debug/watchkeeper", debugview.Handler(d))
package debugview

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/watchkeeper/watchkeeper/cacher"
)

// snapshotTimeout bounds the whole page: each snapshot asks etcd for its
// revision, and a page must not hang on a dead etcd.
const snapshotTimeout = 5 * time.Second

// Page is the JSON document.
type Page struct {
	Time      time.Time  `json:"time"`
	Resources []Snapshot `json:"resources"`
}

// Source is what has caches to show: a
// [*github.com/watchkeeper/watchkeeper/decorator.Decorator] lists those it
// made.
type Source interface {
	Caches() []*cacher.Cacher
}

// Handler serves the caches of src. JSON when asked for with ?format=json
// or an Accept header naming application/json; HTML otherwise, reloading
// itself every N seconds with ?refresh=N (1 to 3600).
func Handler(src Source) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), snapshotTimeout)
		defer cancel()
		page := Page{Time: time.Now().UTC()}
		for _, c := range src.Caches() {
			page.Resources = append(page.Resources, newSnapshot(c.Inspect(ctx)))
		}
		w.Header().Set("Cache-Control", "no-store")
		if wantsJSON(r) {
			w.Header().Set("Content-Type", "application/json")
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			_ = enc.Encode(page)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if err := pageTemplate.Execute(w, newHTMLPage(page, refreshSeconds(r.URL.Query().Get("refresh")))); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
}

func wantsJSON(r *http.Request) bool {
	if f := r.URL.Query().Get("format"); f != "" {
		return f == "json"
	}
	return strings.Contains(r.Header.Get("Accept"), "application/json")
}
