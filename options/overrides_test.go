package options

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	widgets = schema.GroupResource{Group: "demo.watchkeeper.io", Resource: "widgets"}
	gadgets = schema.GroupResource{Group: "demo.watchkeeper.io", Resource: "gadgets"}
	pods    = schema.GroupResource{Resource: "pods"}
)

func TestResourceOverrides(t *testing.T) {
	const flag = "--" + FlagResourceOverrides + "="
	for _, tc := range []struct {
		name     string
		args     []string
		parseErr string
		valErrs  []string
		check    func(t *testing.T, o *WatchCacheOptions)
	}{
		{
			name: "a 5s heartbeat for one hot resource, the default minute for the rest",
			args: []string{flag + "widgets.demo.watchkeeper.io:bookmark-frequency=5s,bookmark-pre-deadline-offset=1s,events-history-window=20s"},
			check: func(t *testing.T, o *WatchCacheOptions) {
				w := o.ForResource(widgets)
				if w.BookmarkFrequency != 5*time.Second || w.BookmarkPreDeadlineOffset != time.Second || w.EffectiveEventsHistoryWindow() != 20*time.Second {
					t.Errorf("widgets: %+v", *w)
				}
				g := o.ForResource(gadgets)
				if g.BookmarkFrequency != time.Minute || g.EffectiveEventsHistoryWindow() != 75*time.Second {
					t.Errorf("gadgets keep the defaults: %+v", *g)
				}
				if w.ResourceOverrides != nil || g.ResourceOverrides != nil {
					t.Error("ForResource carries the overrides along")
				}
			},
		},
		{
			name: "several resources, every key, the core group",
			args: []string{
				flag + "widgets.demo.watchkeeper.io:bookmark-granularity=500ms,bookmark-jitter=0,bookmark-max-staleness=2s",
				flag + "pods:bookmark-frequency=10s",
			},
			check: func(t *testing.T, o *WatchCacheOptions) {
				w := o.ForResource(widgets)
				if w.BookmarkGranularity != 500*time.Millisecond || w.BookmarkJitter != 0 || w.BookmarkMaxStaleness != 2*time.Second {
					t.Errorf("widgets: %+v", *w)
				}
				if p := o.ForResource(pods); p.BookmarkFrequency != 10*time.Second {
					t.Errorf("pods: %+v", *p)
				}
			},
		},
		{
			name: "a memory budget for all, a larger one for one resource",
			args: []string{"--" + FlagMaxBytes + "=64Mi", flag + "pods:max-bytes=2G"},
			check: func(t *testing.T, o *WatchCacheOptions) {
				if w := o.ForResource(widgets); w.MaxBytes != 64<<20 {
					t.Errorf("widgets: max bytes %d, want the global 64Mi", w.MaxBytes)
				}
				if p := o.ForResource(pods); p.MaxBytes != 2_000_000_000 {
					t.Errorf("pods: max bytes %d, want 2G", p.MaxBytes)
				}
			},
		},
		{
			name: "compact pods, the rest decoded",
			args: []string{flag + "pods:compact=true"},
			check: func(t *testing.T, o *WatchCacheOptions) {
				if !o.ForResource(pods).Compact || o.ForResource(widgets).Compact {
					t.Errorf("compact: pods %v, widgets %v; want true, false", o.ForResource(pods).Compact, o.ForResource(widgets).Compact)
				}
			},
		},
		{
			name: "compact all but one",
			args: []string{"--" + FlagCompact, flag + "pods:compact=false"},
			check: func(t *testing.T, o *WatchCacheOptions) {
				if o.ForResource(pods).Compact || !o.ForResource(widgets).Compact {
					t.Errorf("compact: pods %v, widgets %v; want false, true", o.ForResource(pods).Compact, o.ForResource(widgets).Compact)
				}
			},
		},
		{name: "bad compact", args: []string{flag + "pods:compact=yes please"}, parseErr: `compact="yes please": want true or false`},
		{name: "bad max bytes", args: []string{flag + "pods:max-bytes=lots"}, parseErr: `max-bytes="lots": not a quantity of bytes`},
		{name: "a fraction of a byte", args: []string{"--" + FlagMaxBytes + "=1500m"}, parseErr: "not a whole number of bytes"},
		{
			name:    "a negative budget",
			args:    []string{flag + "pods:max-bytes=-1Ki"},
			valErrs: []string{"--watch-cache-resource-overrides for pods: --watch-cache-max-bytes=-1024: must not be negative (0 means no budget)"},
		},
		{name: "unknown key", args: []string{flag + "widgets.demo.watchkeeper.io:frequency=5s"}, parseErr: `unknown setting "frequency"; the settings are bookmark-frequency,`},
		{name: "bad duration", args: []string{flag + "widgets.demo.watchkeeper.io:bookmark-frequency=fast"}, parseErr: `bookmark-frequency="fast"`},
		{name: "bad jitter", args: []string{flag + "widgets.demo.watchkeeper.io:bookmark-jitter=x"}, parseErr: `bookmark-jitter="x"`},
		{name: "no settings", args: []string{flag + "widgets.demo.watchkeeper.io"}, parseErr: "want resource.group:key=value"},
		{name: "no resource", args: []string{flag + ":bookmark-frequency=5s"}, parseErr: "want resource.group:key=value"},
		{name: "not key=value", args: []string{flag + "widgets.demo.watchkeeper.io:5s"}, parseErr: `"5s" is not key=value`},
		{name: "key twice", args: []string{flag + "widgets.demo.watchkeeper.io:bookmark-frequency=5s,bookmark-frequency=6s"}, parseErr: "bookmark-frequency given twice"},
		{
			name:     "resource twice",
			args:     []string{flag + "widgets.demo.watchkeeper.io:bookmark-frequency=5s", flag + "widgets.demo.watchkeeper.io:bookmark-jitter=0"},
			parseErr: "widgets.demo.watchkeeper.io is overridden twice",
		},
		{
			name: "an override that breaks a global rule names the resource",
			args: []string{flag + "widgets.demo.watchkeeper.io:bookmark-frequency=5s,bookmark-pre-deadline-offset=5s"},
			valErrs: []string{
				"--watch-cache-resource-overrides for widgets.demo.watchkeeper.io: --watch-cache-bookmark-pre-deadline-offset=5s: must be less than --watch-cache-bookmark-frequency (5s)",
				// The default window follows the frequency: 20s is enough.
			},
		},
		{
			name: "an override that sets only a 2s frequency: its offset follows it, as the global one does",
			args: []string{flag + "widgets.demo.watchkeeper.io:bookmark-frequency=2s"},
			check: func(t *testing.T, o *WatchCacheOptions) {
				if w := o.ForResource(widgets); w.BookmarkPreDeadlineOffset != time.Second {
					t.Errorf("widgets: offset %v, want 1s", w.BookmarkPreDeadlineOffset)
				}
				if g := o.ForResource(gadgets); g.BookmarkPreDeadlineOffset != 2*time.Second {
					t.Errorf("gadgets: offset %v, want 2s", g.BookmarkPreDeadlineOffset)
				}
			},
		},
		{
			name: "a global 2s frequency, a 1m override: each offset follows its own frequency",
			args: []string{"--watch-cache-bookmark-frequency=2s", flag + "gadgets.demo.watchkeeper.io:bookmark-frequency=1m"},
			check: func(t *testing.T, o *WatchCacheOptions) {
				if w := o.ForResource(widgets); w.BookmarkPreDeadlineOffset != time.Second {
					t.Errorf("widgets: offset %v, want 1s", w.BookmarkPreDeadlineOffset)
				}
				if g := o.ForResource(gadgets); g.BookmarkPreDeadlineOffset != 2*time.Second {
					t.Errorf("gadgets: offset %v, want 2s", g.BookmarkPreDeadlineOffset)
				}
			},
		},
		{
			name: "a global offset given is held to an override's frequency",
			args: []string{"--watch-cache-bookmark-pre-deadline-offset=1500ms", flag + "widgets.demo.watchkeeper.io:bookmark-frequency=1s"},
			valErrs: []string{
				"--watch-cache-resource-overrides for widgets.demo.watchkeeper.io: --watch-cache-bookmark-pre-deadline-offset=1.5s: must be less than --watch-cache-bookmark-frequency (1s)",
			},
		},
		{
			name: "an override's offset given at the default's value does not follow its frequency",
			args: []string{flag + "widgets.demo.watchkeeper.io:bookmark-frequency=2s,bookmark-pre-deadline-offset=2s"},
			valErrs: []string{
				"--watch-cache-resource-overrides for widgets.demo.watchkeeper.io: --watch-cache-bookmark-pre-deadline-offset=2s: must be less than --watch-cache-bookmark-frequency (2s)",
			},
		},
		{
			name: "the global window fixed at 75s is too short for a 2m override",
			args: []string{"--watch-cache-events-history-window=75s", flag + "gadgets.demo.watchkeeper.io:bookmark-frequency=2m"},
			valErrs: []string{
				"--watch-cache-resource-overrides for gadgets.demo.watchkeeper.io: --watch-cache-events-history-window=1m15s: must be at least --watch-cache-bookmark-frequency + --watch-cache-bookmark-granularity (2m1s) so the newest bookmark is always resumable",
			},
		},
		{
			name:    "a global problem is reported once, not once per resource",
			args:    []string{"--watch-cache-bookmark-jitter=2", flag + "gadgets.demo.watchkeeper.io:bookmark-frequency=2m"},
			valErrs: []string{"--watch-cache-bookmark-jitter=2: must be at least 0 and less than 1"},
		},
		{
			name:    "an override can fix what it sets",
			args:    []string{"--watch-cache-bookmark-jitter=2", flag + "gadgets.demo.watchkeeper.io:bookmark-jitter=0.1"},
			valErrs: []string{"--watch-cache-bookmark-jitter=2: must be at least 0 and less than 1"},
		},
		{
			name:    "max staleness below two granularities",
			args:    []string{flag + "widgets.demo.watchkeeper.io:bookmark-max-staleness=1s"},
			valErrs: []string{"--watch-cache-resource-overrides for widgets.demo.watchkeeper.io: --watch-cache-bookmark-max-staleness=1s: must be at least 2 x --watch-cache-bookmark-granularity (2s): the tick asks for progress one tick ahead"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parse(t, tc.args...)
			if tc.parseErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.parseErr) {
					t.Fatalf("parse error %v, want one containing %q", err, tc.parseErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			errs := o.Validate()
			var got []string
			for _, e := range errs {
				got = append(got, e.Error())
			}
			if strings.Join(got, "\n") != strings.Join(tc.valErrs, "\n") {
				t.Fatalf("Validate:\n got %q\nwant %q", got, tc.valErrs)
			}
			if tc.check != nil {
				tc.check(t, o)
			}
		})
	}
}

func TestValidateServedListsTheServedResources(t *testing.T) {
	o, err := parse(t, "--"+FlagResourceOverrides+"=widgits.demo.watchkeeper.io:bookmark-frequency=5s",
		"--"+FlagResourceOverrides+"=gadgets.demo.watchkeeper.io:bookmark-frequency=5s")
	if err != nil {
		t.Fatal(err)
	}
	err = o.ValidateServed([]schema.GroupResource{widgets, gadgets})
	want := "--watch-cache-resource-overrides names resources this server does not serve: widgits.demo.watchkeeper.io; it serves: gadgets.demo.watchkeeper.io, widgets.demo.watchkeeper.io"
	if err == nil || err.Error() != want {
		t.Fatalf("ValidateServed = %v, want %q", err, want)
	}
	if err := o.ValidateServed([]schema.GroupResource{widgets, gadgets, {Group: "demo.watchkeeper.io", Resource: "widgits"}}); err != nil {
		t.Fatalf("every override served: %v", err)
	}
}
