package options

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// FlagDecorator picks which watch cache serves a server's resources, so one
// binary runs watchkeeper or upstream's cache side by side.
const FlagDecorator = "watch-cache-decorator"

// The values of --watch-cache-decorator.
const (
	// DecoratorWatchkeeper is watchkeeper's cache, configured by
	// WatchCacheOptions.
	DecoratorWatchkeeper = "watchkeeper"
	// DecoratorUpstream is k8s.io/apiserver's own cacher
	// (registry.StorageWithCacher), for comparisons: WatchCacheOptions do
	// not apply to it.
	DecoratorUpstream = "upstream"
	// DecoratorNone serves every resource straight from etcd.
	DecoratorNone = "none"
)

// Decorators lists the values of --watch-cache-decorator.
var Decorators = []string{DecoratorWatchkeeper, DecoratorUpstream, DecoratorNone}

// AddDecoratorFlag registers --watch-cache-decorator on fs, bound to name,
// its current value the default.
func AddDecoratorFlag(fs *pflag.FlagSet, name *string) {
	fs.StringVar(name, FlagDecorator, *name,
		"Which watch cache serves the resources: watchkeeper, upstream (k8s.io/apiserver's own, for comparisons; "+
			"the other --watch-cache-* flags of this section do not apply to it) or none (straight from etcd).")
}

// ValidateDecorator reports a value of --watch-cache-decorator that is not
// one of Decorators.
func ValidateDecorator(name string) error {
	if slices.Contains(Decorators, name) {
		return nil
	}
	return fmt.Errorf("--%s=%q: must be one of %s", FlagDecorator, name, strings.Join(Decorators, ", "))
}
