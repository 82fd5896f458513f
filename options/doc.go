// Package options holds [WatchCacheOptions], the operator-facing settings of
// watchkeeper's watch cache: what the upstream cacher hardcodes, as flags,
// with upstream's values as the defaults and validated together.
//
//	opts := options.NewWatchCacheOptions()
//	opts.AddFlags(fs)
//	// ... parse ...
//	if errs := opts.Validate(); len(errs) > 0 { ... }
//
// It is a leaf that imports no other watchkeeper package, so a server
// registers and validates the flags before it builds any cache. The options
// hold every default, per-resource overrides ([ResourceOverride]) included;
// [github.com/watchkeeper/watchkeeper/decorator.New] takes them and turns
// them into each resource's [github.com/watchkeeper/watchkeeper/cacher.Config],
// whose zero values are never defaults. [AddDecoratorFlag] adds the flag
// that picks watchkeeper, upstream's cache or none
// ([github.com/watchkeeper/watchkeeper/decorator.Choose]).
package options
