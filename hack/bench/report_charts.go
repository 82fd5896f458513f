package main

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
)

// chart is one scaling figure plotted against the number of watchers.
type chart struct {
	file, title, yLabel string
	scenario            string
	// metrics are the names the figure has at the storage and http levels.
	metrics []string
	logY    bool
}

var charts = []chart{
	{file: "idle_heap_stack_per_watcher.png", title: "Idle watchers: heap+stack per watcher, net of the bare-goroutine baseline",
		yLabel: "bytes per watcher", scenario: "idle", metrics: []string{"heap_stack_bytes_per_watcher_net"}},
	{file: "idle_open_time.png", title: "Idle watchers: time to open all of them",
		yLabel: "seconds (log)", scenario: "idle", metrics: []string{"open_seconds"}, logY: true},
	{file: "fanout_events_per_second.png", title: "Fan-out: events delivered per second",
		yLabel: "events/s", scenario: "fanout", metrics: []string{"events_per_second", "events_delivered_per_second"}},
	{file: "bookmarks_cpu_per_second.png", title: "Bookmarks: process CPU per second over one bookmark period",
		yLabel: "CPU seconds per second", scenario: "bookmarks", metrics: []string{"cpu_seconds_per_second"}},
}

// seriesStyle keeps each decorator's colour the same in every chart.
var seriesStyle = map[string]color.Color{
	decUpstream:    color.RGBA{R: 0x1f, G: 0x5f, B: 0xbf, A: 0xff},
	decWatchkeeper: color.RGBA{R: 0xe0, G: 0x6c, B: 0x00, A: 0xff},
	decNone:        color.RGBA{R: 0x80, G: 0x80, B: 0x80, A: 0xff},
}

// drawCharts writes the charts that have data and returns their paths.
func drawCharts(dir string, results []result.Result) ([]string, error) {
	var written []string
	for _, c := range charts {
		series := chartSeries(c, results)
		if len(series) == 0 {
			continue
		}
		path := filepath.Join(dir, c.file)
		if err := drawChart(path, c, series); err != nil {
			return written, err
		}
		written = append(written, path)
	}
	return written, nil
}

type series struct {
	decorator, level string
	points           plotter.XYs
	// closed lists, per size, watches the cache closed during the run: a
	// throughput over the survivors needs that said next to it.
	closed string
}

func chartSeries(c chart, results []result.Result) []series {
	byName := map[string]*series{}
	var order []string
	for _, r := range results {
		if r.Scenario != c.scenario || !slices.Contains(c.metrics, r.Metric) || r.Params["watchers"] == 0 {
			continue
		}
		if c.logY && r.Value <= 0 {
			continue
		}
		name := r.Decorator + "|" + r.Level
		s, ok := byName[name]
		if !ok {
			s = &series{decorator: r.Decorator, level: r.Level}
			byName[name] = s
			order = append(order, name)
		}
		s.points = append(s.points, plotter.XY{X: float64(r.Params["watchers"]), Y: r.Value})
	}
	out := make([]series, 0, len(order))
	for _, name := range order {
		s := byName[name]
		sort.Slice(s.points, func(i, j int) bool { return s.points[i].X < s.points[j].X })
		s.closed = closedWatchers(c.scenario, s.decorator, s.level, results)
		out = append(out, *s)
	}
	return out
}

// closedWatchers is "<closed> of <watchers>" for each size of a series at
// which the cache closed watches, or "".
func closedWatchers(scenario, decorator, level string, results []result.Result) string {
	var parts []string
	for _, r := range results {
		if r.Scenario == scenario && r.Decorator == decorator && r.Level == level &&
			r.Metric == "watchers_closed" && r.Value > 0 {
			parts = append(parts, fmt.Sprintf("%.0f of %d", r.Value, r.Params["watchers"]))
		}
	}
	return strings.Join(parts, ", ")
}

func drawChart(path string, c chart, all []series) error {
	p := plot.New()
	p.Title.Text = c.title
	p.X.Label.Text = "watchers (log)"
	p.Y.Label.Text = c.yLabel
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	if c.logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())

	minX, maxX := math.Inf(1), math.Inf(-1)
	minY, maxY := math.Inf(1), math.Inf(-1)
	for _, s := range all {
		line, points, err := plotter.NewLinePoints(s.points)
		if err != nil {
			return err
		}
		col := seriesStyle[s.decorator]
		if col == nil {
			col = color.Black
		}
		line.Color, points.Color = col, col
		line.Width = vg.Points(2)
		points.Shape = draw.CircleGlyph{}
		points.Radius = vg.Points(3.5)
		label := s.decorator
		if s.closed != "" {
			label += " (watchers closed by the cache: " + s.closed + ")"
		}
		if s.level != "storage" {
			label += " (" + s.level + ")"
			line.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		}
		p.Add(line, points)
		p.Legend.Add(label, line, points)
		for _, pt := range s.points {
			minX, maxX = math.Min(minX, pt.X), math.Max(maxX, pt.X)
			minY, maxY = math.Min(minY, pt.Y), math.Max(maxY, pt.Y)
		}
	}
	// Pad the axes: a single size would otherwise give an empty range, and
	// the legend needs headroom above the highest point.
	p.X.Min, p.X.Max = minX/2, maxX*2
	if c.logY {
		p.Y.Min, p.Y.Max = minY/2, maxY*4
	} else {
		p.Y.Min, p.Y.Max = math.Min(0, minY*1.1), maxY*1.35
	}
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}
