package options

import (
	"io"
	"math"
	"math/big"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// FuzzFlags parses random values of the watch-cache flags from the command
// line with the FlagSet AddFlags fills, and checks that Validate never
// panics, names a flag in every error, and returns no error exactly when
// every rule holds:
//
//	granularity > 0; frequency > 0 and >= granularity;
//	0 <= pre-deadline offset < frequency, where an offset not given is
//	min(2s, frequency/2), so it never fails;
//	window >= 0 and the effective window >= frequency + granularity
//	(computed without overflow);
//	0 <= jitter < 1; capacity > 0;
//	0 <= silence timeout; max staleness 0 or >= 2 x granularity;
//	every duration <= MaxDuration.
//
// An empty value leaves its flag off the command line, so defaults are
// fuzzed too.
func FuzzFlags(f *testing.F) {
	// freq, offset, window, granularity, jitter, capacity, silence timeout, max staleness
	f.Add("", "", "", "", "", "", "", "")                                           // every default
	f.Add("5s", "500ms", "30s", "250ms", "0", "1", "10s", "500ms")                  // valid, every flag set
	f.Add("1s", "0s", "2s", "1s", "0.999999", "9223372036854775807", "8760h", "2s") // every bound met exactly
	// Each bound missed by the smallest step, the other values valid.
	f.Add("999.999999ms", "0s", "2s", "1s", "0", "1", "", "")                          // frequency < granularity
	f.Add("1s", "1s", "2s", "1s", "0", "1", "", "")                                    // offset = frequency
	f.Add("1s", "-1ns", "2s", "1s", "0", "1", "", "")                                  // negative offset
	f.Add("1s", "0s", "1.999999999s", "1s", "0", "1", "", "")                          // window 1ns short of frequency + granularity
	f.Add("1s", "0s", "-1ns", "1s", "0", "1", "", "")                                  // negative window
	f.Add("1s", "0s", "2s", "0", "0", "1", "", "")                                     // granularity 0
	f.Add("1s", "0s", "2s", "1s", "1", "1", "", "")                                    // jitter 1
	f.Add("1s", "0s", "2s", "1s", "-4.9e-324", "1", "", "")                            // jitter just below 0
	f.Add("1s", "0s", "2s", "1s", "0", "0", "", "")                                    // capacity 0
	f.Add("16s", "", "", "16s", "", "", "", "")                                        // default window 31s < frequency + granularity 32s
	f.Add("15s", "", "", "15s", "", "", "", "")                                        // default window 30s = frequency + granularity
	f.Add("0", "-1ns", "-1ns", "-1s", "-0.0000001", "-1", "-1ns", "-1ns")              // everything wrong at once
	f.Add("1ns", "0", "", "1ns", "NaN", "0x10", "", "")                                // the smallest; NaN jitter, hex capacity
	f.Add("1m", "59.999999999s", "", "", "+Inf", "1e3", "", "")                        // offset just below frequency; Inf jitter, a float capacity
	f.Add("2s", "", "", "", "", "", "", "")                                            // a frequency alone at the default offset: the offset follows it
	f.Add("1ns", "", "2ns", "1ns", "", "", "", "")                                     // the smallest frequency alone: the offset follows it to 0
	f.Add("2s", "2s", "", "", "", "", "", "")                                          // an offset given at the default's value stays
	f.Add("1h", "", "", "2h", "-Inf", "010", "", "")                                   // granularity above frequency; octal capacity
	f.Add("2562047h", "2562047h", "0", "1h", "", "", "", "")                           // near the largest duration
	f.Add("9223372036854775807ns", "", "9223372036854775807ns", "1ns", "", "", "", "") // the largest duration
	f.Add("", "", "", "", "", "", "-1ns", "")                                          // negative silence timeout
	f.Add("", "", "", "", "", "", "0", "")                                             // silence check off
	f.Add("", "", "", "", "", "", "8760h0m0.000000001s", "")                           // silence timeout 1ns above the bound
	f.Add("", "", "", "", "", "", "", "-1ns")                                          // negative max staleness
	f.Add("", "", "", "", "", "", "", "0")                                             // max staleness off
	f.Add("", "", "", "", "", "", "", "1.999999999s")                                  // max staleness 1ns below 2 x granularity
	f.Add("", "", "", "250ms", "", "", "", "500ms")                                    // max staleness exactly 2 x a finer granularity
	f.Add("", "", "", "", "", "", "", "8760h0m0.000000001s")                           // max staleness 1ns above the bound
	f.Add("", "", "", "", "", "", "9223372036854775807ns", "1ns")                      // the largest silence timeout, the smallest max staleness
	// The known bug: frequency + granularity, and frequency + 15s, overflow.
	f.Add("2562047h47m16s", "", "1h", "1s", "", "", "", "")
	f.Add("2562047h47m16s", "", "", "1s", "", "", "", "")
	f.Add("2562047h47m16.854775808s", "1.5", "1e9s", "5", "0x1p-2", "99999999999999999999", "", "") // unparsable values
	f.Add("1s=2s", "--", " 1s", "1s ", "0.5", "1_000", "", "")                                      // odd spellings

	f.Fuzz(func(t *testing.T, freq, offset, window, granularity, jitter, capacity, silence, staleness string) {
		o := NewWatchCacheOptions()
		fs := pflag.NewFlagSet("fuzz", pflag.ContinueOnError)
		fs.SetOutput(io.Discard)
		o.AddFlags(fs)
		var args []string
		for _, fv := range []struct{ flag, value string }{
			{FlagBookmarkFrequency, freq},
			{FlagBookmarkPreDeadlineOffset, offset},
			{FlagEventsHistoryWindow, window},
			{FlagBookmarkGranularity, granularity},
			{FlagBookmarkJitter, jitter},
			{FlagEventsHistoryCapacity, capacity},
			{FlagStorageSilenceTimeout, silence},
			{FlagBookmarkMaxStaleness, staleness},
		} {
			if fv.value != "" {
				args = append(args, "--"+fv.flag+"="+fv.value)
			}
		}
		parseErr := fs.Parse(args)
		if parseErr == nil {
			checkParsed(t, o, freq, offset, window, granularity, jitter, capacity, silence, staleness)
		}

		// Validate looks at whatever the flags left, parsed or not.
		errs := o.Validate()
		for _, err := range errs {
			if !namesAFlag(err.Error()) {
				t.Errorf("error names no flag: %v", err)
			}
		}

		given := fs.Changed(FlagBookmarkPreDeadlineOffset)
		inForce := offsetModel(given, o.BookmarkPreDeadlineOffset, o.BookmarkFrequency)
		if got := o.ForResource(schema.GroupResource{}).BookmarkPreDeadlineOffset; got != inForce {
			t.Fatalf("args %q: offset in force %v, want %v", args, got, inForce)
		}
		if !given {
			for _, err := range errs {
				if strings.HasPrefix(err.Error(), "--"+FlagBookmarkPreDeadlineOffset+"=") {
					t.Fatalf("args %q: the offset was not given, yet Validate refused its default: %v", args, err)
				}
			}
		}
		broken := brokenRules(o, inForce)
		if len(errs) == 0 && len(broken) > 0 {
			t.Fatalf("args %q (parse error: %v): Validate accepted %+v, which breaks: %s", args, parseErr, *o, strings.Join(broken, "; "))
		}
		if len(errs) > 0 && len(broken) == 0 {
			t.Fatalf("args %q (parse error: %v): Validate refused %+v, which breaks no rule: %v", args, parseErr, *o, errs)
		}
	})
}

// checkParsed checks that a successful parse stored each given value in its
// field, as pflag's own parsers read it.
func checkParsed(t *testing.T, o *WatchCacheOptions, freq, offset, window, granularity, jitter, capacity, silence, staleness string) {
	t.Helper()
	for _, d := range []struct {
		value string
		field time.Duration
	}{
		{freq, o.BookmarkFrequency}, {offset, o.BookmarkPreDeadlineOffset}, {window, o.EventsHistoryWindow}, {granularity, o.BookmarkGranularity},
		{silence, o.StorageSilenceTimeout}, {staleness, o.BookmarkMaxStaleness},
	} {
		if d.value == "" {
			continue
		}
		if want, err := time.ParseDuration(d.value); err != nil || want != d.field {
			t.Fatalf("%q parsed into %v, want %v (%v)", d.value, d.field, want, err)
		}
	}
	if jitter != "" {
		want, err := strconv.ParseFloat(jitter, 64)
		if err != nil || (want != o.BookmarkJitter && !(math.IsNaN(want) && math.IsNaN(o.BookmarkJitter))) {
			t.Fatalf("jitter %q parsed into %v, want %v (%v)", jitter, o.BookmarkJitter, want, err)
		}
	}
	if capacity != "" {
		if want, err := strconv.ParseInt(capacity, 0, 0); err != nil || int(want) != o.EventsHistoryCapacity {
			t.Fatalf("capacity %q parsed into %v, want %v (%v)", capacity, o.EventsHistoryCapacity, want, err)
		}
	}
}

// offsetModel is the pre-deadline offset in force as the flag's help states
// it: the one given, else upstream's 2s capped at half the frequency.
func offsetModel(given bool, offset, frequency time.Duration) time.Duration {
	if given || frequency <= 0 {
		return offset
	}
	return min(2*time.Second, frequency/2)
}

// brokenRules lists the rules o breaks with offset as its pre-deadline
// offset, computing sums exactly.
func brokenRules(o *WatchCacheOptions, offset time.Duration) []string {
	var broken []string
	rule := func(ok bool, what string) {
		if !ok {
			broken = append(broken, what)
		}
	}
	rule(o.BookmarkGranularity > 0, "granularity > 0")
	rule(o.BookmarkFrequency > 0, "frequency > 0")
	rule(o.BookmarkFrequency >= o.BookmarkGranularity, "frequency >= granularity")
	rule(offset >= 0, "offset >= 0")
	rule(offset < o.BookmarkFrequency, "offset < frequency")
	rule(o.EventsHistoryWindow >= 0, "window >= 0")
	minWindow := new(big.Int).Add(big.NewInt(int64(o.BookmarkFrequency)), big.NewInt(int64(o.BookmarkGranularity)))
	rule(big.NewInt(int64(o.EffectiveEventsHistoryWindow())).Cmp(minWindow) >= 0,
		"effective window ("+o.EffectiveEventsHistoryWindow().String()+") >= frequency + granularity ("+minWindow.String()+"ns)")
	rule(o.BookmarkJitter >= 0 && o.BookmarkJitter < 1, "0 <= jitter < 1")
	for name, d := range map[string]time.Duration{
		"frequency": o.BookmarkFrequency, "offset": offset,
		"window": o.EventsHistoryWindow, "granularity": o.BookmarkGranularity,
	} {
		rule(d <= MaxDuration, name+" <= MaxDuration")
	}
	rule(o.EventsHistoryCapacity > 0, "capacity > 0")
	rule(o.StorageSilenceTimeout >= 0 && o.StorageSilenceTimeout <= MaxDuration, "0 <= silence timeout <= MaxDuration")
	rule(o.BookmarkMaxStaleness >= 0 && o.BookmarkMaxStaleness <= MaxDuration, "0 <= max staleness <= MaxDuration")
	rule(o.BookmarkMaxStaleness == 0 || o.BookmarkGranularity <= 0 || o.BookmarkGranularity > MaxDuration ||
		o.BookmarkMaxStaleness > MaxDuration || o.BookmarkFrequency > MaxDuration || o.BookmarkPreDeadlineOffset > MaxDuration ||
		o.EventsHistoryWindow > MaxDuration || o.StorageSilenceTimeout > MaxDuration ||
		big.NewInt(int64(o.BookmarkMaxStaleness)).Cmp(new(big.Int).Mul(big.NewInt(2), big.NewInt(int64(o.BookmarkGranularity)))) >= 0,
		"max staleness 0 or >= 2 x granularity")
	return broken
}

func namesAFlag(msg string) bool {
	for _, flag := range []string{
		FlagBookmarkFrequency, FlagBookmarkPreDeadlineOffset, FlagEventsHistoryWindow,
		FlagBookmarkGranularity, FlagBookmarkJitter, FlagEventsHistoryCapacity,
		FlagStorageSilenceTimeout, FlagBookmarkMaxStaleness,
	} {
		if strings.HasPrefix(msg, "--"+flag+"=") {
			return true
		}
	}
	return false
}

// FuzzResourceOverrides parses random values of --watch-cache-resource-overrides
// (twice, as the flag repeats) on top of a random global frequency, and
// checks that parsing never panics and that Validate accepts the options
// exactly when the global options and every resource's effective options
// keep every rule of FuzzFlags.
func FuzzResourceOverrides(f *testing.F) {
	f.Add("", "widgets.demo.watchkeeper.io:bookmark-frequency=5s", "")
	f.Add("10s", "widgets.demo.watchkeeper.io:bookmark-frequency=5s,bookmark-pre-deadline-offset=5s", "pods:bookmark-jitter=0.5")
	f.Add("", "pods:bookmark-max-staleness=1s", "x.y:bookmark-granularity=0")
	f.Add("1s", "a:events-history-window=1s,bookmark-granularity=2s", "a:bookmark-jitter=0")
	f.Add("", "a:bookmark-jitter=NaN", "b:bookmark-frequency=2562047h47m16s")
	f.Add("", ":", "a:b=c")
	f.Add("", "a:bookmark-frequency=2s", "b:bookmark-frequency=1s,bookmark-pre-deadline-offset=2s") // one offset follows, one was given
	f.Add("2s", "a:bookmark-frequency=1m", "b:bookmark-pre-deadline-offset=1s")                     // the global offset follows the global frequency
	f.Fuzz(func(t *testing.T, freq, first, second string) {
		o := NewWatchCacheOptions()
		fs := pflag.NewFlagSet("fuzz", pflag.ContinueOnError)
		fs.SetOutput(io.Discard)
		o.AddFlags(fs)
		var args []string
		if freq != "" {
			args = append(args, "--"+FlagBookmarkFrequency+"="+freq)
		}
		for _, v := range []string{first, second} {
			if v != "" {
				args = append(args, "--"+FlagResourceOverrides+"="+v)
			}
		}
		if err := fs.Parse(args); err != nil {
			return // refused at parse: nothing to validate
		}
		errs := o.Validate()
		for _, err := range errs {
			msg := err.Error()
			if strings.HasPrefix(msg, "--"+FlagResourceOverrides+" for ") {
				_, msg, _ = strings.Cut(msg, ": ")
			}
			if !namesAFlag(msg) {
				t.Errorf("error names no flag: %v", err)
			}
		}
		given := fs.Changed(FlagBookmarkPreDeadlineOffset)
		broken := brokenRules(o, offsetModel(given, o.BookmarkPreDeadlineOffset, o.BookmarkFrequency))
		for gr, ov := range o.ResourceOverrides {
			// The resource's offset: its own, or the global one, which
			// follows the resource's frequency unless it was given.
			freq := o.BookmarkFrequency
			if ov.BookmarkFrequency != nil {
				freq = *ov.BookmarkFrequency
			}
			offset := offsetModel(given, o.BookmarkPreDeadlineOffset, freq)
			if ov.BookmarkPreDeadlineOffset != nil {
				offset = *ov.BookmarkPreDeadlineOffset
			}
			r := o.ForResource(gr)
			if r.BookmarkPreDeadlineOffset != offset {
				t.Fatalf("args %q: %s's offset in force %v, want %v", args, FormatGroupResource(gr), r.BookmarkPreDeadlineOffset, offset)
			}
			for _, b := range brokenRules(r, offset) {
				broken = append(broken, FormatGroupResource(gr)+": "+b)
			}
		}
		if len(errs) == 0 && len(broken) > 0 {
			t.Fatalf("args %q: Validate accepted options that break: %s", args, strings.Join(broken, "; "))
		}
		if len(errs) > 0 && len(broken) == 0 {
			t.Fatalf("args %q: Validate refused options that break no rule: %v", args, errs)
		}
	})
}
