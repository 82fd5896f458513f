package debugview

import (
	"fmt"
	"html/template"
)

// bar is one column of a calendar histogram, in SVG user units.
type bar struct {
	X, Y, W, H float64
	Title      string
}

type htmlResource struct {
	Snapshot
	Name       string
	Bars       []bar
	ChartW     float64
	ChartH     float64
	MaxSlot    int
	RVLag      string
	PeriodText string
}

type htmlPage struct {
	Time      string
	Resources []htmlResource
}

const (
	chartH   = 120.0
	barWidth = 8.0
	barGap   = 2.0
)

func newHTMLPage(p Page) htmlPage {
	out := htmlPage{Time: p.Time.Format("2006-01-02 15:04:05 MST")}
	for _, s := range p.Resources {
		r := htmlResource{Snapshot: s, Name: s.Resource, ChartH: chartH}
		if s.Group != "" {
			r.Name += "." + s.Group
		}
		for _, n := range s.Calendar.Slots {
			r.MaxSlot = max(r.MaxSlot, n)
		}
		g := float64(s.Calendar.Granularity)
		for i, n := range s.Calendar.Slots {
			h := 0.0
			if r.MaxSlot > 0 {
				h = chartH * float64(n) / float64(r.MaxSlot)
			}
			r.Bars = append(r.Bars, bar{
				X: float64(i) * (barWidth + barGap), Y: chartH - h, W: barWidth, H: h,
				Title: fmt.Sprintf("+%gs..+%gs: %d watchers", float64(i)*g, float64(i+1)*g, n),
			})
		}
		r.ChartW = max(float64(len(s.Calendar.Slots))*(barWidth+barGap), barWidth)
		switch {
		case s.EtcdError != "":
			r.RVLag = "etcd unreachable: " + s.EtcdError
		case s.EtcdRV >= s.CacheRV:
			r.RVLag = fmt.Sprintf("%d revisions behind etcd", s.EtcdRV-s.CacheRV)
		default:
			r.RVLag = "ahead of the revision read from etcd (read raced a write)"
		}
		r.PeriodText = fmt.Sprintf("%gs in %d slots of %gs", float64(s.Schedule.BookmarkFrequency), len(s.Calendar.Slots), g)
		out.Resources = append(out.Resources, r)
	}
	return out
}

var pageTemplate = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>watchkeeper: watch caches</title>
<style>
body { font-family: sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: .5em 0 1em; }
td, th { border: 1px solid #ccc; padding: 2px 8px; text-align: left; font-size: 90%; }
section { margin-bottom: 2em; }
rect.slot { fill: #3b6ea8; }
svg { border-bottom: 1px solid #888; }
.muted { color: #777; font-size: 85%; }
</style></head>
<body>
<h1>watchkeeper watch caches</h1>
<p class="muted">{{.Time}} &middot; <a href="?format=json">JSON</a></p>
{{range .Resources}}
<section>
<h2>{{.Name}} {{if .Ready}}(ready){{else}}(NOT READY){{end}}</h2>
<table>
<tr><th>watchers</th><td>WaitingForBookmark {{index .Watchers "WaitingForBookmark"}}, BookmarkReceived {{index .Watchers "BookmarkReceived"}}, BookmarkSent {{index .Watchers "BookmarkSent"}}</td></tr>
<tr><th>cache RV / etcd RV</th><td>{{.CacheRV}} / {{.EtcdRV}} ({{.RVLag}})</td></tr>
<tr><th>last heard from etcd</th><td>{{printf "%.3f" .LastHeardAge}}s ago</td></tr>
<tr><th>history</th><td>{{.History.Events}} events (bound {{.History.Bound}}, capacity {{.History.Capacity}}, window {{.History.Window}}s); oldest RV {{.History.OldestRV}} ({{printf "%.1f" .History.OldestAge}}s old), newest RV {{.History.NewestRV}} ({{printf "%.1f" .History.NewestAge}}s old); resumable from RV {{.History.StartRV}}; {{.History.Snapshots}} snapshots for exact-RV and paginated lists</td></tr>
<tr><th>last tick</th><td>{{printf "%.6f" .LastTickDuration}}s</td></tr>
<tr><th>schedule</th><td>bookmarks every {{.Schedule.BookmarkFrequency}}s, pre-deadline {{.Schedule.BookmarkPreDeadlineOffset}}s, granularity {{.Schedule.BookmarkGranularity}}s, jitter {{.Schedule.BookmarkJitter}}, max staleness {{.Schedule.BookmarkMaxStaleness}}s</td></tr>
</table>
<p>Bookmark calendar, next {{.PeriodText}}: {{.Calendar.Filed}} filed, {{.Calendar.Overdue}} due on the next tick, {{.Calendar.Later}} beyond the period; tallest slot {{.MaxSlot}}.</p>
<svg width="{{.ChartW}}" height="{{.ChartH}}" viewBox="0 0 {{.ChartW}} {{.ChartH}}" role="img" aria-label="watchers per calendar slot">
{{range .Bars}}<rect class="slot" x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="{{.H}}"><title>{{.Title}}</title></rect>
{{end}}</svg>
<p class="muted">one bar per slot, now at the left; hover a bar for its count</p>
</section>
{{else}}
<p>No watch cache is running.</p>
{{end}}
</body></html>
`))
