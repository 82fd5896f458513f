package debugview

import (
	"fmt"
	"html/template"
	"math"
	"strconv"
	"strings"
	"time"
)

// The HTML page is for an operator who looks once: per resource whether the
// cache is ready, how far behind etcd it is, the history as a time span,
// watchers by state, the last tick in units a person reads, and the bookmark
// calendar as a chart with a time axis and counts. Everything is worked out
// here, in Go; the template only places strings.

type htmlPage struct {
	Time      string
	Refresh   int // seconds; 0: no auto-refresh
	Refreshes []refreshChoice
	JSONHref  string
	Resources []htmlResource
}

type refreshChoice struct {
	Label, Href string
	Current     bool
}

type htmlResource struct {
	Name, ID    string
	Ready       bool
	OverBudget  bool
	RV          string // cache against etcd, in words
	RVProblem   bool   // etcd unreadable
	LastHeard   string
	History     string // the span, in words
	HistoryMore string // bounds, start RV, snapshots
	Watchers    []watcherRow
	Total       int
	LastTick    string
	Schedule    string
	Calendar    string // filed, due now, beyond the period
	Chart       chart
	Filed       int // no chart when 0: an empty chart says nothing
}

type watcherRow struct {
	Label, State string
	Count        int
}

// refreshChoices are the auto-refresh periods offered as links.
var refreshChoices = []int{0, 2, 5, 10, 30}

// maxRefresh bounds ?refresh=: a larger or malformed value means none.
const maxRefresh = 3600

// refreshSeconds reads ?refresh=N: whole seconds in [1, maxRefresh], else 0.
func refreshSeconds(q string) int {
	n, err := strconv.Atoi(q)
	if err != nil || n < 1 || n > maxRefresh {
		return 0
	}
	return n
}

func newHTMLPage(p Page, refresh int) htmlPage {
	out := htmlPage{Time: p.Time.Format("2006-01-02 15:04:05 MST"), Refresh: refresh, JSONHref: "?format=json"}
	for _, n := range refreshChoices {
		c := refreshChoice{Label: "off", Href: "?", Current: n == refresh}
		if n > 0 {
			c.Label, c.Href = fmt.Sprintf("every %ds", n), fmt.Sprintf("?refresh=%d", n)
		}
		out.Refreshes = append(out.Refreshes, c)
	}
	for _, s := range p.Resources {
		out.Resources = append(out.Resources, newHTMLResource(s))
	}
	return out
}

func newHTMLResource(s Snapshot) htmlResource {
	r := htmlResource{Name: s.Resource, Ready: s.Ready, OverBudget: s.Budget != nil && s.Budget.Over}
	if s.Group != "" {
		r.Name += "." + s.Group
	}
	r.ID = "r-" + strings.NewReplacer(".", "-", "/", "-").Replace(r.Name)

	switch {
	case s.EtcdError != "":
		r.RV, r.RVProblem = fmt.Sprintf("cache at RV %d; etcd's revision unreadable: %s", s.CacheRV, s.EtcdError), true
	case s.EtcdRV == s.CacheRV:
		r.RV = fmt.Sprintf("in step with etcd (RV %d)", s.CacheRV)
	case s.EtcdRV > s.CacheRV:
		r.RV = fmt.Sprintf("%s behind etcd (cache RV %d, etcd %d)", plural(int(s.EtcdRV-s.CacheRV), "revision"), s.CacheRV, s.EtcdRV)
	default:
		r.RV = fmt.Sprintf("cache RV %d, etcd %d (etcd was read before the cache's last event)", s.CacheRV, s.EtcdRV)
	}
	r.LastHeard = "never"
	if s.LastHeardAge > 0 {
		r.LastHeard = human(s.LastHeardAge.duration()) + " ago"
	}

	h := s.History
	switch h.Events {
	case 0:
		r.History = fmt.Sprintf("empty: no event since RV %d; a watch resumes from RV %d on", h.StartRV, h.StartRV)
	case 1:
		r.History = fmt.Sprintf("1 event: RV %d, %s ago", h.NewestRV, human(h.NewestAge.duration()))
	default:
		r.History = fmt.Sprintf("%s spanning %s: RV %d, %s ago, to RV %d, %s ago",
			plural(h.Events, "event"), human((h.OldestAge - h.NewestAge).duration()),
			h.OldestRV, human(h.OldestAge.duration()), h.NewestRV, human(h.NewestAge.duration()))
	}
	r.HistoryMore = fmt.Sprintf("resumable from RV %d; window %s (kept at least that long; older events stay until the room is needed); holds up to %d now, %d at most; %s for exact-RV and paginated lists",
		h.StartRV, human(h.Window.duration()), h.Bound, h.Capacity, plural(h.Snapshots, "snapshot"))

	r.Watchers = []watcherRow{
		{"streaming: plain watches, and WatchLists past their initial events", "BookmarkSent", s.Watchers["BookmarkSent"]},
		{"WatchList sending its initial events, waiting for its floor", "WaitingForBookmark", s.Watchers["WaitingForBookmark"]},
		{"WatchList whose end bookmark is queued, not yet read", "BookmarkReceived", s.Watchers["BookmarkReceived"]},
		{"stalled: its client fell behind; fed from the history when it reads again", "stalled", s.StalledWatchers},
	}
	if b := s.Budget; b != nil {
		r.Watchers = append(r.Watchers, watcherRow{"relayed: handed to etcd when the resource went over its memory budget", "relayed", b.RelayedWatches})
	}
	for _, w := range r.Watchers {
		r.Total += w.Count
	}

	r.LastTick = "none yet"
	if s.LastTickDuration > 0 {
		r.LastTick = human(s.LastTickDuration.duration())
	}
	sc := s.Schedule
	staleness := "off"
	if sc.BookmarkMaxStaleness > 0 {
		staleness = human(sc.BookmarkMaxStaleness.duration())
	}
	r.Schedule = fmt.Sprintf("a bookmark every %s, the last %s before a watch's deadline; calendar slots of %s, tick jitter %g; max staleness %s",
		human(sc.BookmarkFrequency.duration()), human(sc.BookmarkPreDeadlineOffset.duration()),
		human(sc.BookmarkGranularity.duration()), sc.BookmarkJitter, staleness)

	c := s.Calendar
	r.Calendar = "no watcher is filed for bookmarks"
	if c.Filed > 0 {
		r.Calendar = fmt.Sprintf("%s filed for bookmarks: %d due on the next tick, %d in the next %s, %d later",
			plural(c.Filed, "watcher"), c.Overdue, c.Filed-c.Overdue-c.Later, human(sc.BookmarkFrequency.duration()), c.Later)
	}
	r.Chart, r.Filed = newChart(c.Slots, c.Granularity.duration()), c.Filed
	return r
}

func (s Seconds) duration() time.Duration { return time.Duration(math.Round(float64(s) * 1e9)) }

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// human writes a duration the way a person reads it: two significant
// digits in the largest unit under a minute (850ns, 20us, 1.2ms, 3.4s, 42s),
// minutes and seconds under an hour (2m05s), hours and minutes above.
func human(d time.Duration) string {
	if d < 0 {
		return "-" + human(-d)
	}
	if d == 0 {
		return "0s"
	}
	if d < time.Microsecond {
		return fmt.Sprintf("%dns", int64(d))
	}
	for _, u := range []struct {
		unit  time.Duration
		name  string
		below float64 // the next unit, in this one
	}{{time.Microsecond, "us", 1000}, {time.Millisecond, "ms", 1000}, {time.Second, "s", 60}} {
		v := float64(d) / float64(u.unit)
		if v < 10 {
			v = math.Round(v*10) / 10
		} else {
			v = math.Round(v)
		}
		if v < u.below {
			return strconv.FormatFloat(v, 'f', -1, 64) + u.name
		}
	}
	if d < time.Hour-30*time.Second {
		d = d.Round(time.Second)
		if d%time.Minute == 0 {
			return fmt.Sprintf("%dm", d/time.Minute)
		}
		return fmt.Sprintf("%dm%02ds", d/time.Minute, d%time.Minute/time.Second)
	}
	d = d.Round(time.Minute)
	if d%time.Hour == 0 {
		return fmt.Sprintf("%dh", d/time.Hour)
	}
	return fmt.Sprintf("%dh%02dm", d/time.Hour, d%time.Hour/time.Minute)
}

// chart is the calendar drawn as SVG: one bar per slot (or per group of
// slots when there are many), a time axis from now to the end of the period,
// a count axis, and each bar's count written over it.
type chart struct {
	W, H                       float64
	PlotX, PlotY, PlotW, PlotH float64
	Bottom, Right              float64 // PlotY+PlotH, PlotX+PlotW
	Bars                       []bar
	XTicks, YTicks             []tick
	XTitle, YTitle             string
	Desc                       string
}

type bar struct {
	X, Y, W, H     float64
	Count          int
	Label          string // the count over the bar; "" when it would not fit
	LabelX, LabelY float64
	Title          string
}

type tick struct {
	X, Y   float64
	X2, Y2 float64 // a grid line's end (count axis), a tick mark's end (time axis)
	Label  string
}

const (
	chartW       = 980.0
	plotLeft     = 56.0
	plotRight    = 16.0
	plotTop      = 22.0
	plotH        = 150.0
	plotBottom   = 48.0
	maxBars      = 120
	minLabelBarW = 14.0 // narrower bars get their count in the tooltip only
)

func newChart(slots []int, granularity time.Duration) chart {
	c := chart{W: chartW, H: plotTop + plotH + plotBottom, PlotX: plotLeft, PlotY: plotTop,
		PlotW: chartW - plotLeft - plotRight, PlotH: plotH}
	c.Bottom, c.Right = c.PlotY+c.PlotH, c.PlotX+c.PlotW
	if len(slots) == 0 || granularity <= 0 {
		return c
	}
	// Group slots so that there are at most maxBars bars.
	per := (len(slots) + maxBars - 1) / maxBars
	var counts []int
	for i := 0; i < len(slots); i += per {
		n := 0
		for _, v := range slots[i:min(i+per, len(slots))] {
			n += v
		}
		counts = append(counts, n)
	}
	binW := time.Duration(per) * granularity
	period := time.Duration(len(slots)) * granularity
	top := 0
	for _, n := range counts {
		top = max(top, n)
	}
	yStep := niceStep(top, 5)
	yMax := max(yStep, (top+yStep-1)/yStep*yStep)

	c.XTitle = "time from now (bar: " + human(binW) + ")"
	c.YTitle = "watchers due"
	c.Desc = fmt.Sprintf("Watchers due for a bookmark in each %s of the next %s; the tallest bar holds %d.", human(binW), human(period), top)

	w := c.PlotW / float64(len(counts))
	gap := math.Min(2, w/5)
	for i, n := range counts {
		h := c.PlotH * float64(n) / float64(yMax)
		b := bar{X: c.PlotX + float64(i)*w + gap/2, W: w - gap, Y: c.Bottom - h, H: h, Count: n,
			Title: fmt.Sprintf("+%s to +%s: %s", human(time.Duration(i)*binW), human(time.Duration(i+1)*binW), plural(n, "watcher"))}
		if n > 0 && (w >= minLabelBarW || n == top) {
			b.Label, b.LabelX, b.LabelY = strconv.Itoa(n), b.X+b.W/2, b.Y-4
		}
		c.Bars = append(c.Bars, b)
	}
	for v := 0; v <= yMax; v += yStep {
		c.YTicks = append(c.YTicks, tick{X: c.PlotX, Y: c.Bottom - c.PlotH*float64(v)/float64(yMax), X2: c.Right, Label: strconv.Itoa(v)})
	}
	xStep := niceDuration(period, 10, granularity)
	for t := time.Duration(0); t <= period; t += xStep {
		label := "now"
		if t > 0 {
			label = "+" + human(t)
		}
		c.XTicks = append(c.XTicks, tick{X: c.PlotX + c.PlotW*float64(t)/float64(period), Y: c.Bottom, Y2: c.Bottom + 4, Label: label})
	}
	return c
}

// niceStep is the smallest 1, 2 or 5 x 10^k that divides [0, top] into at
// most n steps.
func niceStep(top, n int) int {
	for step := 1; ; step *= 10 {
		for _, m := range []int{1, 2, 5} {
			if top <= m*step*n {
				return m * step
			}
		}
	}
}

// niceDurations are the time axis's label spacings.
var niceDurations = []time.Duration{
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour,
}

// niceDuration is the smallest spacing, a multiple of granularity, that puts
// at most n labels past "now" on an axis of length period.
func niceDuration(period time.Duration, n int, granularity time.Duration) time.Duration {
	for _, d := range niceDurations {
		if d >= granularity && d%granularity == 0 && period/d <= time.Duration(n) {
			return d
		}
	}
	step := granularity
	for period/step > time.Duration(n) {
		step *= 2
	}
	return step
}

var pageTemplate = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
{{if .Refresh}}<meta http-equiv="refresh" content="{{.Refresh}}">{{end}}
<title>watchkeeper: watch caches</title>
<style>
body { font-family: system-ui, sans-serif; margin: 1.2em 1.5em; color: #1d2329; max-width: 70em; }
h1 { font-size: 1.4em; margin: 0 0 .2em; }
h2 { font-size: 1.15em; margin: 1.6em 0 .4em; }
table { border-collapse: collapse; margin: .4em 0 .8em; }
td, th { border-bottom: 1px solid #dde2e6; padding: 4px 10px 4px 0; text-align: left; vertical-align: top; font-size: 92%; }
th { color: #4a5560; font-weight: 600; white-space: nowrap; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
td.nowrap { white-space: nowrap; }
.state { display: inline-block; padding: 1px 8px; border-radius: 9px; font-size: 85%; font-weight: 600; }
.ready { background: #dcf2e0; color: #17622b; }
.notready { background: #fadbd8; color: #8f1d14; }
.problem { color: #8f1d14; }
.muted { color: #66717c; font-size: 88%; }
code { font-size: 90%; }
nav a, nav strong { margin-right: .6em; }
svg text { font-family: system-ui, sans-serif; fill: #33404c; }
svg .axis { stroke: #66717c; stroke-width: 1; }
svg .grid { stroke: #e4e8eb; stroke-width: 1; }
svg rect.slot { fill: #3b6ea8; }
</style></head>
<body>
<h1>watchkeeper watch caches</h1>
<p class="muted">taken {{.Time}} &middot; <a href="{{.JSONHref}}">JSON for tools</a></p>
<nav class="muted">auto-refresh: {{range .Refreshes}}{{if .Current}}<strong>{{.Label}}</strong>{{else}}<a href="{{.Href}}">{{.Label}}</a>{{end}} {{end}}</nav>
{{if .Resources}}
<table class="summary">
<tr><th>resource</th><th>state</th><th>against etcd</th><th>last heard from etcd</th><th>history</th><th>watchers</th></tr>
{{range .Resources}}<tr><td><a href="#{{.ID}}">{{.Name}}</a></td><td>{{if .Ready}}<span class="state ready">ready</span>{{else if .OverBudget}}<span class="state notready">over its memory budget: served from etcd</span>{{else}}<span class="state notready">not ready</span>{{end}}</td><td class="nowrap{{if .RVProblem}} problem{{end}}">{{.RV}}</td><td class="nowrap">{{.LastHeard}}</td><td>{{.History}}</td><td class="n">{{.Total}}</td></tr>
{{end}}</table>
<p class="muted">etcd's revision moves with every resource's writes; a quiet resource's cache catches up at etcd's next progress notification, so a few revisions behind with a recent "last heard" is normal.</p>
{{range .Resources}}
<section id="{{.ID}}">
<h2>{{.Name}} {{if .Ready}}<span class="state ready">ready</span>{{else if .OverBudget}}<span class="state notready">over its memory budget: served from etcd</span>{{else}}<span class="state notready">not ready</span>{{end}}</h2>
<table>
<tr><th>against etcd</th><td{{if .RVProblem}} class="problem"{{end}}>{{.RV}}; last heard {{.LastHeard}}</td></tr>
<tr><th>history</th><td>{{.History}}<br><span class="muted">{{.HistoryMore}}</span></td></tr>
<tr><th>watchers</th><td>
<table class="watchers">
{{range .Watchers}}<tr><td class="n">{{.Count}}</td><td>{{.Label}} <code class="muted">{{.State}}</code></td></tr>
{{end}}<tr><td class="n"><strong>{{.Total}}</strong></td><td>in all</td></tr>
</table></td></tr>
<tr><th>last bookmark tick</th><td>took {{.LastTick}}</td></tr>
<tr><th>schedule</th><td>{{.Schedule}}</td></tr>
</table>
<p>Bookmark calendar: {{.Calendar}}.</p>
{{if .Filed}}{{with .Chart}}<svg class="calendar" width="{{.W}}" height="{{.H}}" viewBox="0 0 {{.W}} {{.H}}" role="img" aria-label="{{.Desc}}">
<title>{{.Desc}}</title>
{{range .YTicks}}<line class="grid" x1="{{.X}}" y1="{{.Y}}" x2="{{.X2}}" y2="{{.Y}}"/>
<text class="ytick" x="{{.X}}" y="{{.Y}}" dx="-6" dy="4" text-anchor="end" font-size="11">{{.Label}}</text>
{{end}}{{range .Bars}}<rect class="slot" x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="{{.H}}"><title>{{.Title}}</title></rect>
{{if .Label}}<text class="count" x="{{.LabelX}}" y="{{.LabelY}}" text-anchor="middle" font-size="11">{{.Label}}</text>
{{end}}{{end}}<line class="axis" x1="{{.PlotX}}" y1="{{.Bottom}}" x2="{{.Right}}" y2="{{.Bottom}}"/>
<line class="axis" x1="{{.PlotX}}" y1="{{.PlotY}}" x2="{{.PlotX}}" y2="{{.Bottom}}"/>
{{range .XTicks}}<line class="axis" x1="{{.X}}" y1="{{.Y}}" x2="{{.X}}" y2="{{.Y2}}"/>
<text class="xtick" x="{{.X}}" y="{{.Y}}" dy="16" text-anchor="middle" font-size="11">{{.Label}}</text>
{{end}}<text class="xtitle" x="{{.PlotX}}" y="{{.H}}" dx="{{.PlotW}}" dy="-6" text-anchor="end" font-size="12">{{.XTitle}}</text>
<text class="ytitle" x="4" y="{{.PlotY}}" dy="-8" font-size="12">{{.YTitle}}</text>
</svg>{{end}}{{end}}
</section>
{{end}}
{{else}}
<p>No watch cache is running.</p>
{{end}}
</body></html>
`))
