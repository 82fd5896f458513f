// Package options holds WatchCacheOptions, the operator-facing settings of
// watchkeeper's watch cache: what the upstream cacher hardcodes, as flags,
// with upstream's values as the defaults and validated together.
//
//	opts := options.NewWatchCacheOptions()
//	opts.AddFlags(fs)
//	// ... parse ...
//	if errs := opts.Validate(); len(errs) > 0 { ... }
package options
