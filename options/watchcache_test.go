package options

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func parse(t *testing.T, args ...string) (*WatchCacheOptions, error) {
	t.Helper()
	o := NewWatchCacheOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.SetOutput(&strings.Builder{})
	o.AddFlags(fs)
	return o, fs.Parse(args)
}

func TestDefaultsAreUpstreams(t *testing.T) {
	o, err := parse(t)
	if err != nil {
		t.Fatal(err)
	}
	want := &WatchCacheOptions{
		BookmarkFrequency:         time.Minute,
		BookmarkPreDeadlineOffset: 2 * time.Second,
		BookmarkGranularity:       time.Second,
		BookmarkJitter:            0.25,
		EventsHistoryCapacity:     100_000,
		StorageSilenceTimeout:     15 * time.Second,
		// Beyond upstream, which closes a slow watcher: never worse for a
		// client, so on (cacher/stall.go).
		StallSlowWatchers: true,
		// Cached objects are never written, so sharing what siblings have
		// equal is invisible to clients (cacher/internal/feed/siblings.go).
		ShareSiblings: true,
	}
	if diff := cmp.Diff(want, o, cmp.AllowUnexported(WatchCacheOptions{})); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	if got := o.EffectiveEventsHistoryWindow(); got != 75*time.Second {
		t.Errorf("default history window = %v, want 75s", got)
	}
	if errs := o.Validate(); len(errs) != 0 {
		t.Errorf("defaults invalid: %v", errs)
	}
}

func TestParseAndValidate(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		want       func(o *WatchCacheOptions) bool
		wantErrors []string // substrings, one per expected error, in order
	}{
		{
			name: "every flag set",
			args: []string{
				"--watch-cache-bookmark-frequency=5s",
				"--watch-cache-bookmark-pre-deadline-offset=500ms",
				"--watch-cache-events-history-window=30s",
				"--watch-cache-bookmark-granularity=250ms",
				"--watch-cache-bookmark-jitter=0",
			},
			want: func(o *WatchCacheOptions) bool {
				return o.BookmarkFrequency == 5*time.Second && o.BookmarkPreDeadlineOffset == 500*time.Millisecond &&
					o.EventsHistoryWindow == 30*time.Second && o.EffectiveEventsHistoryWindow() == 30*time.Second &&
					o.BookmarkGranularity == 250*time.Millisecond && o.BookmarkJitter == 0
			},
		},
		{
			name: "unset window follows the frequency",
			args: []string{"--watch-cache-bookmark-frequency=10s"},
			want: func(o *WatchCacheOptions) bool { return o.EffectiveEventsHistoryWindow() == 25*time.Second },
		},
		{
			name: "window exactly frequency + granularity",
			args: []string{"--watch-cache-bookmark-frequency=10s", "--watch-cache-events-history-window=11s"},
		},
		{
			name: "a frequency alone of 2s: the default offset follows it to 1s",
			args: []string{"--watch-cache-bookmark-frequency=2s"},
			want: func(o *WatchCacheOptions) bool { return offsetInForce(o) == time.Second },
		},
		{
			name: "a frequency alone of 1s: the default offset follows it to 500ms",
			args: []string{"--watch-cache-bookmark-frequency=1s"},
			want: func(o *WatchCacheOptions) bool { return offsetInForce(o) == 500*time.Millisecond },
		},
		{
			name: "a frequency alone of 3s: the default offset is half of it",
			args: []string{"--watch-cache-bookmark-frequency=3s"},
			want: func(o *WatchCacheOptions) bool { return offsetInForce(o) == 1500*time.Millisecond },
		},
		{
			name: "the smallest frequency alone: the default offset is 0",
			args: []string{"--watch-cache-bookmark-frequency=1ns", "--watch-cache-bookmark-granularity=1ns", "--watch-cache-events-history-window=2ns"},
			want: func(o *WatchCacheOptions) bool { return offsetInForce(o) == 0 },
		},
		{
			name: "from a 4s frequency up the default offset is upstream's 2s",
			args: []string{"--watch-cache-bookmark-frequency=4s"},
			want: func(o *WatchCacheOptions) bool { return offsetInForce(o) == 2*time.Second },
		},
		{
			name: "an offset given is kept, whatever the frequency",
			args: []string{"--watch-cache-bookmark-pre-deadline-offset=1500ms", "--watch-cache-bookmark-frequency=2s"},
			want: func(o *WatchCacheOptions) bool { return offsetInForce(o) == 1500*time.Millisecond },
		},
		{
			name:       "an offset given at the default's value does not follow the frequency",
			args:       []string{"--watch-cache-bookmark-frequency=2s", "--watch-cache-bookmark-pre-deadline-offset=2s"},
			wantErrors: []string{"--watch-cache-bookmark-pre-deadline-offset=2s: must be less than --watch-cache-bookmark-frequency (2s)"},
		},
		{
			name:       "an offset given above a frequency given alone",
			args:       []string{"--watch-cache-bookmark-frequency=1s", "--watch-cache-bookmark-pre-deadline-offset=1500ms"},
			wantErrors: []string{"--watch-cache-bookmark-pre-deadline-offset=1.5s: must be less than --watch-cache-bookmark-frequency (1s)"},
		},
		{
			name:       "zero frequency",
			args:       []string{"--watch-cache-bookmark-frequency=0"},
			wantErrors: []string{"--watch-cache-bookmark-frequency=0s: must be greater than 0"},
		},
		{
			name:       "frequency below granularity",
			args:       []string{"--watch-cache-bookmark-frequency=2s", "--watch-cache-bookmark-granularity=3s", "--watch-cache-bookmark-pre-deadline-offset=1s", "--watch-cache-events-history-window=10s"},
			wantErrors: []string{"--watch-cache-bookmark-frequency=2s: must be at least --watch-cache-bookmark-granularity (3s)"},
		},
		{
			name:       "negative offset",
			args:       []string{"--watch-cache-bookmark-pre-deadline-offset=-1s"},
			wantErrors: []string{"--watch-cache-bookmark-pre-deadline-offset=-1s: must not be negative"},
		},
		{
			name:       "offset equal to frequency",
			args:       []string{"--watch-cache-bookmark-frequency=5s", "--watch-cache-bookmark-pre-deadline-offset=5s"},
			wantErrors: []string{"--watch-cache-bookmark-pre-deadline-offset=5s: must be less than --watch-cache-bookmark-frequency (5s)"},
		},
		{
			name:       "window too short for the newest bookmark",
			args:       []string{"--watch-cache-bookmark-frequency=10s", "--watch-cache-events-history-window=10500ms"},
			wantErrors: []string{"--watch-cache-events-history-window=10.5s: must be at least --watch-cache-bookmark-frequency + --watch-cache-bookmark-granularity (11s)"},
		},
		{
			name:       "negative window",
			args:       []string{"--watch-cache-events-history-window=-5s"},
			wantErrors: []string{"--watch-cache-events-history-window=-5s: must not be negative"},
		},
		{
			name:       "default window too short for a coarse granularity",
			args:       []string{"--watch-cache-bookmark-granularity=20s"},
			wantErrors: []string{"--watch-cache-events-history-window=0s: defaults to --watch-cache-bookmark-frequency + 15s (1m15s), which is less than"},
		},
		{
			name:       "zero granularity",
			args:       []string{"--watch-cache-bookmark-granularity=0"},
			wantErrors: []string{"--watch-cache-bookmark-granularity=0s: must be greater than 0"},
		},
		{
			name:       "jitter of one",
			args:       []string{"--watch-cache-bookmark-jitter=1"},
			wantErrors: []string{"--watch-cache-bookmark-jitter=1: must be at least 0 and less than 1"},
		},
		{
			name:       "negative jitter",
			args:       []string{"--watch-cache-bookmark-jitter=-0.1"},
			wantErrors: []string{"--watch-cache-bookmark-jitter=-0.1: must be at least 0 and less than 1"},
		},
		{
			name:       "durations whose sums would overflow",
			args:       []string{"--watch-cache-bookmark-frequency=2562047h47m16s", "--watch-cache-events-history-window=1h"},
			wantErrors: []string{"--watch-cache-bookmark-frequency=2562047h47m16s: must be at most 8760h0m0s"},
		},
		{
			name:       "zero capacity",
			args:       []string{"--watch-cache-events-history-capacity=0"},
			wantErrors: []string{"--watch-cache-events-history-capacity=0: must be greater than 0"},
		},
		{
			name: "capacity set",
			args: []string{"--watch-cache-events-history-capacity=500"},
			want: func(o *WatchCacheOptions) bool { return o.EventsHistoryCapacity == 500 },
		},
		{
			name:       "negative storage silence timeout",
			args:       []string{"--watch-cache-storage-silence-timeout=-1s"},
			wantErrors: []string{"--watch-cache-storage-silence-timeout=-1s: must not be negative (0 turns the check off)"},
		},
		{
			name: "storage silence check off",
			args: []string{"--watch-cache-storage-silence-timeout=0"},
			want: func(o *WatchCacheOptions) bool { return o.StorageSilenceTimeout == 0 },
		},
		{
			name:       "storage silence timeout above the bound",
			args:       []string{"--watch-cache-storage-silence-timeout=9000h"},
			wantErrors: []string{"--watch-cache-storage-silence-timeout=9000h0m0s: must be at most 8760h0m0s"},
		},
		{
			name: "slow watchers closed, as upstream's cache closes them",
			args: []string{"--watch-cache-stall-slow-watchers=false"},
			want: func(o *WatchCacheOptions) bool { return !o.StallSlowWatchers },
		},
		{
			name: "each object its own copy, as upstream's cache holds them",
			args: []string{"--watch-cache-share-siblings=false"},
			want: func(o *WatchCacheOptions) bool { return !o.ShareSiblings },
		},
		{
			name:       "NaN jitter",
			args:       []string{"--watch-cache-bookmark-jitter=NaN"},
			wantErrors: []string{"--watch-cache-bookmark-jitter=NaN: must be at least 0 and less than 1"},
		},
		{
			name: "every problem at once",
			args: []string{
				"--watch-cache-bookmark-frequency=-1s",
				"--watch-cache-bookmark-pre-deadline-offset=-1s",
				"--watch-cache-events-history-window=-1s",
				"--watch-cache-bookmark-granularity=-1s",
				"--watch-cache-bookmark-jitter=2",
				"--watch-cache-events-history-capacity=-1",
			},
			wantErrors: []string{
				"--watch-cache-bookmark-granularity=-1s: must be greater than 0",
				"--watch-cache-bookmark-frequency=-1s: must be greater than 0",
				"--watch-cache-bookmark-pre-deadline-offset=-1s: must not be negative",
				"--watch-cache-events-history-window=-1s: must not be negative",
				"--watch-cache-events-history-capacity=-1: must be greater than 0",
				"--watch-cache-bookmark-jitter=2: must be at least 0 and less than 1",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parse(t, tc.args...)
			if err != nil {
				t.Fatalf("parse %v: %v", tc.args, err)
			}
			if tc.want != nil && !tc.want(o) {
				t.Errorf("parsed %v into %+v", tc.args, o)
			}
			errs := o.Validate()
			if len(errs) != len(tc.wantErrors) {
				t.Fatalf("Validate() = %v, want %d errors %q", errs, len(tc.wantErrors), tc.wantErrors)
			}
			for i, want := range tc.wantErrors {
				if !strings.Contains(errs[i].Error(), want) {
					t.Errorf("error %d = %q, want it to contain %q", i, errs[i], want)
				}
			}
		})
	}
}

// offsetInForce is the pre-deadline offset a resource without an override
// gets: what the decorator hands the cache.
func offsetInForce(o *WatchCacheOptions) time.Duration {
	return o.ForResource(schema.GroupResource{Resource: "any"}).BookmarkPreDeadlineOffset
}

// Options built in Go, not from flags: a frequency set alone gets an offset
// that follows it too; an offset set to anything else is held to the rule.
func TestPreDeadlineOffsetFollowsAFrequencySetInGo(t *testing.T) {
	o := NewWatchCacheOptions()
	o.BookmarkFrequency = 2 * time.Second
	if errs := o.Validate(); len(errs) != 0 {
		t.Errorf("frequency 2s alone: %v", errs)
	}
	if got := offsetInForce(o); got != time.Second {
		t.Errorf("frequency 2s alone: offset %v, want 1s", got)
	}
	o.BookmarkPreDeadlineOffset = 3 * time.Second
	want := "--watch-cache-bookmark-pre-deadline-offset=3s: must be less than --watch-cache-bookmark-frequency (2s)"
	if errs := o.Validate(); len(errs) != 1 || errs[0].Error() != want {
		t.Errorf("offset 3s, frequency 2s: %v, want %q", errs, want)
	}
}

func TestParseRejectsMalformedValues(t *testing.T) {
	for _, args := range [][]string{
		{"--watch-cache-bookmark-frequency=often"},
		{"--watch-cache-bookmark-jitter=a-bit"},
		{"--watch-cache-events-history-window=75"},
		{"--watch-cache-bookmark-pre-deadline-offset=2"},
	} {
		if _, err := parse(t, args...); err == nil {
			t.Errorf("parse %v: want an error", args)
		}
	}
}

func TestHelpNamesDefaultsAndUpstream(t *testing.T) {
	o := NewWatchCacheOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	usage := fs.FlagUsages()
	for _, want := range []string{
		"--watch-cache-bookmark-frequency duration", "(default 1m0s)", "Upstream hardcodes 1m.",
		"--watch-cache-bookmark-pre-deadline-offset duration", "(default 2s)", "Upstream hardcodes 2s.",
		"--watch-cache-events-history-window duration", "Upstream hardcodes 75s",
		"--watch-cache-bookmark-granularity duration", "(default 1s)", "Upstream hardcodes 1s.",
		"--watch-cache-bookmark-jitter float", "(default 0.25)", "Upstream hardcodes 0.25.",
		"--watch-cache-events-history-capacity int", "(default 100000)",
	} {
		if !strings.Contains(usage, want) {
			t.Errorf("flag usage lacks %q:\n%s", want, usage)
		}
	}
}

func TestValidateNil(t *testing.T) {
	var o *WatchCacheOptions
	if errs := o.Validate(); errs != nil {
		t.Errorf("nil options: %v", errs)
	}
}
