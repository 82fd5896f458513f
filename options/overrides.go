package options

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// FlagResourceOverrides sets part of the schedule for one resource.
const FlagResourceOverrides = "watch-cache-resource-overrides"

// ResourceOverride sets some of the schedule for one group/resource; a nil
// field keeps the global value.
type ResourceOverride struct {
	BookmarkFrequency         *time.Duration
	BookmarkPreDeadlineOffset *time.Duration
	EventsHistoryWindow       *time.Duration
	BookmarkGranularity       *time.Duration
	BookmarkJitter            *float64
	BookmarkMaxStaleness      *time.Duration
	MaxBytes                  *int64
	Compact                   *bool
}

// overrideKeys are the settings an override may carry: the global flags'
// names without the "watch-cache-" prefix, so one vocabulary serves both.
var overrideKeys = []string{
	strings.TrimPrefix(FlagBookmarkFrequency, flagPrefix),
	strings.TrimPrefix(FlagBookmarkPreDeadlineOffset, flagPrefix),
	strings.TrimPrefix(FlagEventsHistoryWindow, flagPrefix),
	strings.TrimPrefix(FlagBookmarkGranularity, flagPrefix),
	strings.TrimPrefix(FlagBookmarkJitter, flagPrefix),
	strings.TrimPrefix(FlagBookmarkMaxStaleness, flagPrefix),
	strings.TrimPrefix(FlagMaxBytes, flagPrefix),
	strings.TrimPrefix(FlagCompact, flagPrefix),
}

const flagPrefix = "watch-cache-"

// apply returns o with the override's settings in place of the global ones.
func (r ResourceOverride) apply(o WatchCacheOptions) WatchCacheOptions {
	set := func(dst *time.Duration, v *time.Duration) {
		if v != nil {
			*dst = *v
		}
	}
	set(&o.BookmarkFrequency, r.BookmarkFrequency)
	if r.BookmarkPreDeadlineOffset != nil {
		o.BookmarkPreDeadlineOffset, o.preDeadlineOffsetGiven = *r.BookmarkPreDeadlineOffset, true
	}
	set(&o.EventsHistoryWindow, r.EventsHistoryWindow)
	set(&o.BookmarkGranularity, r.BookmarkGranularity)
	set(&o.BookmarkMaxStaleness, r.BookmarkMaxStaleness)
	if r.BookmarkJitter != nil {
		o.BookmarkJitter = *r.BookmarkJitter
	}
	if r.MaxBytes != nil {
		o.MaxBytes = *r.MaxBytes
	}
	if r.Compact != nil {
		o.Compact = *r.Compact
	}
	o.ResourceOverrides = nil
	return o
}

// ForResource returns the options in force for gr: the global ones with gr's
// override, if any, applied. The result carries no overrides, and its
// BookmarkPreDeadlineOffset is the one in force: an offset nobody gave
// follows gr's frequency (EffectiveBookmarkPreDeadlineOffset), so an
// override that sets only the frequency is valid as the global flag is.
func (o *WatchCacheOptions) ForResource(gr schema.GroupResource) *WatchCacheOptions {
	out := *o
	out.ResourceOverrides = nil
	if r, ok := o.ResourceOverrides[gr]; ok {
		out = r.apply(out)
	}
	out.BookmarkPreDeadlineOffset, out.preDeadlineOffsetGiven = out.EffectiveBookmarkPreDeadlineOffset(), true
	return &out
}

// ValidateServed reports overrides that name a resource the server does not
// serve (a typo would otherwise silently leave the default in force),
// listing the served ones.
func (o *WatchCacheOptions) ValidateServed(served []schema.GroupResource) error {
	var unknown []string
	for gr := range o.ResourceOverrides {
		if !slices.Contains(served, gr) {
			unknown = append(unknown, FormatGroupResource(gr))
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	names := make([]string, 0, len(served))
	for _, gr := range served {
		names = append(names, FormatGroupResource(gr))
	}
	slices.Sort(names)
	return fmt.Errorf("--%s names resources this server does not serve: %s; it serves: %s",
		FlagResourceOverrides, strings.Join(unknown, ", "), strings.Join(names, ", "))
}

// FormatGroupResource writes gr as the flag takes it: resource.group, or
// resource alone for the core group.
func FormatGroupResource(gr schema.GroupResource) string {
	if gr.Group == "" {
		return gr.Resource
	}
	return gr.Resource + "." + gr.Group
}

// overridesValue is the repeatable flag: each occurrence is
// resource.group:key=value[,key=value...].
type overridesValue struct {
	m *map[schema.GroupResource]ResourceOverride
}

func (v overridesValue) Type() string { return "resource.group:key=value,..." }

func (v overridesValue) String() string {
	if v.m == nil || len(*v.m) == 0 {
		return ""
	}
	var parts []string
	for gr := range *v.m {
		parts = append(parts, FormatGroupResource(gr))
	}
	slices.Sort(parts)
	return strings.Join(parts, ";")
}

func (v overridesValue) Set(s string) error {
	gr, override, err := parseOverride(s)
	if err != nil {
		return err
	}
	if *v.m == nil {
		*v.m = map[schema.GroupResource]ResourceOverride{}
	}
	if _, dup := (*v.m)[gr]; dup {
		return fmt.Errorf("%s is overridden twice: give all its settings in one occurrence", FormatGroupResource(gr))
	}
	(*v.m)[gr] = override
	return nil
}

func parseOverride(s string) (schema.GroupResource, ResourceOverride, error) {
	var r ResourceOverride
	name, settings, ok := strings.Cut(s, ":")
	name = strings.TrimSpace(name)
	if !ok || name == "" || strings.TrimSpace(settings) == "" {
		return schema.GroupResource{}, r, fmt.Errorf("%q: want resource.group:key=value[,key=value...] with keys %s", s, strings.Join(overrideKeys, ", "))
	}
	gr := schema.ParseGroupResource(name)
	seen := map[string]bool{}
	for _, kv := range strings.Split(settings, ",") {
		key, value, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return gr, r, fmt.Errorf("%s: %q is not key=value", name, kv)
		}
		if seen[key] {
			return gr, r, fmt.Errorf("%s: %s given twice", name, key)
		}
		seen[key] = true
		if key == strings.TrimPrefix(FlagBookmarkJitter, flagPrefix) {
			f, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return gr, r, fmt.Errorf("%s: %s=%q: %w", name, key, value, err)
			}
			r.BookmarkJitter = &f
			continue
		}
		if key == strings.TrimPrefix(FlagMaxBytes, flagPrefix) {
			n, err := parseBytes(value)
			if err != nil {
				return gr, r, fmt.Errorf("%s: %s=%q: %w", name, key, value, err)
			}
			r.MaxBytes = &n
			continue
		}
		if key == strings.TrimPrefix(FlagCompact, flagPrefix) {
			b, err := strconv.ParseBool(value)
			if err != nil {
				return gr, r, fmt.Errorf("%s: %s=%q: want true or false", name, key, value)
			}
			r.Compact = &b
			continue
		}
		var dst **time.Duration
		switch key {
		case strings.TrimPrefix(FlagBookmarkFrequency, flagPrefix):
			dst = &r.BookmarkFrequency
		case strings.TrimPrefix(FlagBookmarkPreDeadlineOffset, flagPrefix):
			dst = &r.BookmarkPreDeadlineOffset
		case strings.TrimPrefix(FlagEventsHistoryWindow, flagPrefix):
			dst = &r.EventsHistoryWindow
		case strings.TrimPrefix(FlagBookmarkGranularity, flagPrefix):
			dst = &r.BookmarkGranularity
		case strings.TrimPrefix(FlagBookmarkMaxStaleness, flagPrefix):
			dst = &r.BookmarkMaxStaleness
		default:
			return gr, r, fmt.Errorf("%s: unknown setting %q; the settings are %s", name, key, strings.Join(overrideKeys, ", "))
		}
		d, err := time.ParseDuration(value)
		if err != nil {
			return gr, r, fmt.Errorf("%s: %s=%q: %w", name, key, value, err)
		}
		*dst = &d
	}
	return gr, r, nil
}

// validateOverrides checks each resource's effective options with the global
// rules, reporting only what its override breaks.
func (o *WatchCacheOptions) validateOverrides(global []error) []error {
	known := map[string]bool{}
	for _, err := range global {
		known[err.Error()] = true
	}
	grs := make([]schema.GroupResource, 0, len(o.ResourceOverrides))
	for gr := range o.ResourceOverrides {
		grs = append(grs, gr)
	}
	slices.SortFunc(grs, func(a, b schema.GroupResource) int {
		return strings.Compare(FormatGroupResource(a), FormatGroupResource(b))
	})
	var errs []error
	for _, gr := range grs {
		for _, err := range o.ForResource(gr).Validate() {
			if !known[err.Error()] {
				errs = append(errs, fmt.Errorf("--%s for %s: %w", FlagResourceOverrides, FormatGroupResource(gr), err))
			}
		}
	}
	return errs
}
