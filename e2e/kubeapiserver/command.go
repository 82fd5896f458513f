// Package kubeapiserver is kube-apiserver v1.38.0-beta.0 on watchkeeper: upstream's
// command (k8s.io/kubernetes/cmd/kube-apiserver/app), unchanged but for the
// storage decorator of every resource it caches, the built-in ones, the
// custom resources of CRDs and the APIServices, which watchkeeper's
// decorator.RESTOptionsGetter replaces. What the stock server leaves
// uncached (--watch-cache=false, --watch-cache-sizes=resource#0, events)
// stays uncached. Its --help shows watchkeeper's flags in a section of their
// own beside kube-apiserver's; --watch-cache-decorator=upstream runs the
// stock cache from the same binary, for side-by-side runs.
package kubeapiserver

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"k8s.io/apimachinery/pkg/runtime/schema"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apiserver/pkg/server/flagz"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/apiserver/pkg/server/signals"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/cli/globalflag"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	featuremetrics "k8s.io/component-base/metrics/prometheus/feature"
	"k8s.io/component-base/term"
	utilversion "k8s.io/component-base/version"
	"k8s.io/component-base/version/verflag"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"

	"github.com/watchkeeper/watchkeeper/debugview"
	"github.com/watchkeeper/watchkeeper/decorator"
	wkoptions "github.com/watchkeeper/watchkeeper/options"
)

// FlagSection is the --help section of watchkeeper's flags.
const FlagSection = "watch cache (watchkeeper)"

// DebugPath serves watchkeeper's view of its caches (debugview), behind
// kube-apiserver's authentication and authorization like /debug/*.
const DebugPath = "/debug/watchkeeper"

// Options are watchkeeper's flags in kube-apiserver.
type Options struct {
	WatchCache *wkoptions.WatchCacheOptions
	// Decorator is --watch-cache-decorator: watchkeeper, upstream or none.
	Decorator string
}

// NewOptions returns watchkeeper's defaults: its cache, upstream's schedule.
func NewOptions() *Options {
	return &Options{WatchCache: wkoptions.NewWatchCacheOptions(), Decorator: wkoptions.DecoratorWatchkeeper}
}

// AddFlags registers the section's flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.WatchCache.AddFlags(fs)
	wkoptions.AddDecoratorFlag(fs, &o.Decorator)
}

// Validate returns every problem with the options.
func (o *Options) Validate() []error {
	errs := o.WatchCache.Validate()
	if err := wkoptions.ValidateDecorator(o.Decorator); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// NewCommand is app.NewAPIServerCommand with watchkeeper's section and Run.
// Its body follows upstream's line for line, so that flags, logging,
// feature gates and validation behave as in the stock binary.
func NewCommand() *cobra.Command {
	s := options.NewServerRunOptions()
	wk := NewOptions()
	ctx := signals.SetupSignalContext()
	featureGate := s.GenericServerRunOptions.ComponentGlobalsRegistry.FeatureGateFor(basecompatibility.DefaultKubeComponent)

	cmd := &cobra.Command{
		Use: "kube-apiserver",
		Long: `The Kubernetes API server validates and configures data
for the api objects which include pods, services, replicationcontrollers, and
others. The API Server services REST operations and provides the frontend to the
cluster's shared state through which all other components interact.

This build serves the resources kube-apiserver caches from watchkeeper's watch
cache (see the "` + FlagSection + `" flags).`,
		SilenceUsage: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			if err := s.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
				return err
			}
			rest.SetDefaultWarningHandler(rest.NoWarnings{})
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			verflag.PrintAndExitIfRequested()
			fs := cmd.Flags()
			if err := logsapi.ValidateAndApply(s.Logs, featureGate); err != nil {
				return err
			}
			cliflag.PrintFlags(fs)

			completedOptions, err := s.Complete(ctx)
			if err != nil {
				return err
			}
			errs := completedOptions.Validate()
			errs = append(errs, wk.Validate()...)
			if len(errs) != 0 {
				return utilerrors.NewAggregate(errs)
			}
			featureGate.(featuregate.MutableFeatureGate).AddMetrics(featuremetrics.RecordFeatureInfo)
			s.GenericServerRunOptions.ComponentGlobalsRegistry.AddMetrics()
			return Run(ctx, completedOptions, wk)
		},
		Args: func(cmd *cobra.Command, args []string) error {
			for _, arg := range args {
				if len(arg) > 0 {
					return fmt.Errorf("%q does not take any arguments, got %q", cmd.CommandPath(), args)
				}
			}
			return nil
		},
	}
	cmd.SetContext(ctx)

	fs := cmd.Flags()
	namedFlagSets := s.Flags()
	wk.AddFlags(namedFlagSets.FlagSet(FlagSection))
	s.Flagz = flagz.NamedFlagSetsReader{FlagSets: namedFlagSets}
	verflag.AddFlags(namedFlagSets.FlagSet("global"))
	globalflag.AddGlobalFlags(namedFlagSets.FlagSet("global"), cmd.Name(), logs.SkipLoggingConfigurationFlags())
	for _, f := range namedFlagSets.FlagSets {
		fs.AddFlagSet(f)
	}
	cols, _, _ := term.TerminalSize(cmd.OutOrStdout())
	cliflag.SetUsageAndHelpFunc(cmd, namedFlagSets, cols)
	return cmd
}

// Run is app.Run with watchkeeper installed between NewConfig and
// CreateServerChain.
func Run(ctx context.Context, opts options.CompletedOptions, wk *Options) error {
	klog.Infof("Version: %+v", utilversion.Get())
	klog.InfoS("Golang settings", "GOGC", os.Getenv("GOGC"), "GOMAXPROCS", os.Getenv("GOMAXPROCS"), "GOTRACEBACK", os.Getenv("GOTRACEBACK"))
	if opts.InformerName == nil {
		informerName, err := cache.NewInformerName("kube-apiserver")
		if err != nil {
			return err
		}
		opts.InformerName = informerName
	}

	config, err := app.NewConfig(opts)
	if err != nil {
		return err
	}
	name := wk.Decorator
	if !opts.Etcd.EnableWatchCache {
		name = wkoptions.DecoratorNone
	}
	d, err := decorator.Choose(name, wk.WatchCache)
	if err != nil {
		return err
	}
	if err := Install(config, d); err != nil {
		return err
	}
	klog.InfoS("Watch cache", "decorator", name)

	completed, err := config.Complete()
	if err != nil {
		return err
	}
	server, err := app.CreateServerChain(completed)
	if err != nil {
		return err
	}
	if d != nil {
		server.GenericAPIServer.Handler.NonGoRestfulMux.Handle(DebugPath, debugview.Handler(d))
	}
	if name == wkoptions.DecoratorWatchkeeper {
		warnUnknownOverrides(wk.WatchCache, d)
	}
	prepared, err := server.PrepareRun()
	if err != nil {
		return err
	}
	if name == wkoptions.DecoratorWatchkeeper {
		// kube-apiserver stops accepting requests --shutdown-delay-duration
		// after it is told to stop; with open watches its HTTP server then
		// waits up to 60s for them, unless --shutdown-watch-termination-
		// grace-period is set (then its watch handlers return at once and it
		// waits up to that long). watchkeeper ends its watches gracefully
		// (each client reads what is queued) when the server stops accepting
		// requests and the grace period has passed.
		// Before all that, every watch is sent a bookmark at its cache's
		// RV, so that its client resumes from there (WatchesOnShutdown).
		g := opts.GenericServerRunOptions
		var stop func()
		ctx, stop = d.WatchesOnShutdown(ctx, g.ShutdownDelayDuration+g.ShutdownWatchTerminationGracePeriod)
		defer stop()
	}
	return prepared.Run(ctx)
}

// Install makes d the storage decorator of every resource config caches:
// the control plane's generic config (built-in resources), apiextensions'
// generic config (CRDs) and its CRDRESTOptionsGetter (custom resources),
// and the aggregator's (APIServices); with d nil (none), none is cached.
// Each getter keeps what the stock server leaves uncached. It adds a
// readiness check to the aggregator, the head of the delegation chain, so
// /readyz fails until every cache has synced.
func Install(config *app.Config, d *decorator.Decorator) error {
	kube := config.KubeAPIs.ControlPlane.Generic
	ext := config.ApiExtensions
	agg := config.Aggregator.GenericConfig
	if kube.RESTOptionsGetter == nil || ext.GenericConfig.RESTOptionsGetter == nil ||
		ext.ExtraConfig.CRDRESTOptionsGetter == nil || agg.RESTOptionsGetter == nil {
		return fmt.Errorf("kube-apiserver's configuration lacks a RESTOptionsGetter: cannot install the watch cache")
	}
	kube.RESTOptionsGetter = decorator.Install(kube.RESTOptionsGetter, d)
	ext.GenericConfig.RESTOptionsGetter = decorator.Install(ext.GenericConfig.RESTOptionsGetter, d)
	ext.ExtraConfig.CRDRESTOptionsGetter = decorator.Install(ext.ExtraConfig.CRDRESTOptionsGetter, d)
	agg.RESTOptionsGetter = decorator.Install(agg.RESTOptionsGetter, d)
	if d == nil {
		return nil
	}
	// The aggregator's config is a shallow copy of the control plane's: its
	// checks get a slice of their own before one is added.
	agg.ReadyzChecks = slices.Clone(agg.ReadyzChecks)
	agg.AddReadyzChecks(healthz.NamedCheck("watch-caches", func(*http.Request) error { return d.ReadinessCheck() }))
	return nil
}

// warnUnknownOverrides logs the --watch-cache-resource-overrides that name
// no built-in cached resource. They are not an error, as in the sample
// apiserver: a CRD created later may serve the resource.
func warnUnknownOverrides(o *wkoptions.WatchCacheOptions, d *decorator.Decorator) {
	var cached []schema.GroupResource
	for _, c := range d.Caches() {
		cached = append(cached, c.GroupResource())
	}
	for gr := range o.ResourceOverrides {
		if !slices.Contains(cached, gr) {
			klog.InfoS("A watch cache override names no built-in cached resource; it applies if a CRD serves it", "resource", wkoptions.FormatGroupResource(gr))
		}
	}
}
