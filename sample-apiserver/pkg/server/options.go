package server

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"

	wkoptions "github.com/watchkeeper/watchkeeper/options"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/v1alpha1"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/registry"
)

const (
	etcdPathPrefix = "/registry/" + demo.GroupName
	// DefaultDataDir holds the standalone server's etcd data, certificates,
	// token and kubeconfig, kept across restarts.
	DefaultDataDir = ".watchkeeper"
	// DefaultSecurePort is where the standalone server listens by default; an
	// unprivileged port, so it runs without root.
	DefaultSecurePort = 8443

	// DefaultShutdownWatchTerminationGracePeriod lets events in flight reach
	// their clients before the watches end, and is short next to the HTTP
	// server's 60s shutdown timeout that would end them otherwise.
	DefaultShutdownWatchTerminationGracePeriod = 2 * time.Second
)

func init() {
	// The logging options consult feature gates of their own.
	utilruntime.Must(logsapi.AddFeatureGates(utilfeature.DefaultMutableFeatureGate))
}

// Options are the sample apiserver's command-line options.
type Options struct {
	Recommended *genericoptions.RecommendedOptions
	WatchCache  *wkoptions.WatchCacheOptions
	Logs        *logsapi.LoggingConfiguration

	// DataDir is where standalone mode keeps its state.
	DataDir string
	// Decorator picks each resource's watch cache, for side-by-side
	// measurements: watchkeeper (the default), upstream or none.
	Decorator string
	// ShutdownWatchTerminationGracePeriod is how long, once the server is
	// told to stop, its watches may go on before watchkeeper ends them.
	ShutdownWatchTerminationGracePeriod time.Duration
	// TokenAuthFile lists more users than the admin, in kube-apiserver's
	// static token format (standalone mode).
	TokenAuthFile string
	// AuthorizationPolicyFile holds the rules that grant those users
	// access (standalone mode).
	AuthorizationPolicyFile string

	// flags remembers what the command line set, to pick defaults that
	// depend on the mode.
	bindAddressSet bool
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	o := &Options{
		Recommended: genericoptions.NewRecommendedOptions(etcdPathPrefix, Codecs.LegacyCodec(v1alpha1.SchemeGroupVersion)),
		WatchCache:  wkoptions.NewWatchCacheOptions(),
		Logs:        logsapi.NewLoggingConfiguration(),
		DataDir:     DefaultDataDir,
		Decorator:   wkoptions.DecoratorWatchkeeper,

		ShutdownWatchTerminationGracePeriod: DefaultShutdownWatchTerminationGracePeriod,
	}
	o.Recommended.Etcd.StorageConfig.EncodeVersioner = runtime.NewMultiGroupVersioner(
		v1alpha1.SchemeGroupVersion, schema.GroupKind{Group: demo.GroupName})
	o.Recommended.SecureServing.BindPort = DefaultSecurePort
	return o
}

// Flags returns the flags in named sections, printed as such by --help.
func (o *Options) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets
	r := o.Recommended
	r.Etcd.AddFlags(fss.FlagSet("etcd"))
	r.SecureServing.AddFlags(fss.FlagSet("secure serving"))
	r.Authentication.AddFlags(fss.FlagSet("authentication"))
	r.Authorization.AddFlags(fss.FlagSet("authorization"))
	r.Audit.AddFlags(fss.FlagSet("auditing"))
	r.Features.AddFlags(fss.FlagSet("features"))
	r.CoreAPI.AddFlags(fss.FlagSet("core api"))
	r.Admission.AddFlags(fss.FlagSet("admission"))
	wc := fss.FlagSet("watch cache")
	o.WatchCache.AddFlags(wc)
	wkoptions.AddDecoratorFlag(wc, &o.Decorator)
	wc.DurationVar(&o.ShutdownWatchTerminationGracePeriod, "shutdown-watch-termination-grace-period", o.ShutdownWatchTerminationGracePeriod,
		"When the server is told to stop, how long its watches go on before watchkeeper ends them (each after its client read "+
			"what is queued), so clients resume from their last event or bookmark on another replica in seconds rather than "+
			"when the HTTP server's 60s shutdown timeout cuts them off. kube-apiserver's flag of the same name. Not applied "+
			"to --watch-cache-decorator=upstream.")
	logsapi.AddFlags(o.Logs, fss.FlagSet("logs"))
	utilfeature.DefaultMutableFeatureGate.AddFlag(fss.FlagSet("feature gates"))
	fs := fss.FlagSet("standalone")
	fs.StringVar(&o.DataDir, "data-dir", o.DataDir,
		"Standalone mode (no --kubeconfig and not in a cluster): where the embedded etcd's data, the self-signed certificate, "+
			"the admin token and the admin kubeconfig are kept, across restarts.")
	fs.StringVar(&o.TokenAuthFile, "token-auth-file", o.TokenAuthFile,
		"Standalone mode: a file of bearer tokens for users besides the admin, kube-apiserver's static token format, "+
			"one token,user,uid,\"group1,group2\" a line (groups optional). They may do nothing beyond the health endpoints "+
			"unless in the system:masters group or granted by --authorization-policy-file.")
	fs.StringVar(&o.AuthorizationPolicyFile, "authorization-policy-file", o.AuthorizationPolicyFile,
		"Standalone mode: a YAML or JSON list of rules granting users or groups verbs on resources (apiGroups, resources, "+
			"namespaces) or on nonResourceURLs; checked after the system:masters rule, anything no rule grants is denied. "+
			"Not kube-apiserver's ABAC format.")
	return fss
}

// Standalone reports whether the server runs on its own: no core
// Kubernetes API to delegate authentication, authorization and admission to.
func (o *Options) Standalone() bool {
	return o.Recommended.CoreAPI.CoreAPIKubeconfigPath == "" && os.Getenv("KUBERNETES_SERVICE_HOST") == ""
}

// embeddedEtcd reports whether standalone mode must start its own etcd.
func (o *Options) embeddedEtcd() bool {
	return len(o.Recommended.Etcd.StorageConfig.Transport.ServerList) == 0
}

// Complete fills in what depends on the mode; it starts nothing.
func (o *Options) Complete() {
	if !o.Standalone() {
		// Aggregated: the delegated authentication and authorization talk to
		// the cluster the --kubeconfig names, unless told otherwise.
		kc := o.Recommended.CoreAPI.CoreAPIKubeconfigPath
		if o.Recommended.Authentication.RemoteKubeConfigFile == "" {
			o.Recommended.Authentication.RemoteKubeConfigFile = kc
		}
		if o.Recommended.Authorization.RemoteKubeConfigFile == "" {
			o.Recommended.Authorization.RemoteKubeConfigFile = kc
		}
		return
	}
	if !o.bindAddressSet {
		// A developer's standalone server is for this machine only.
		o.Recommended.SecureServing.BindAddress = net.ParseIP("127.0.0.1")
	}
	if o.Recommended.SecureServing.ServerCert.CertDirectory == "" ||
		o.Recommended.SecureServing.ServerCert.CertDirectory == "apiserver.local.config/certificates" {
		o.Recommended.SecureServing.ServerCert.CertDirectory = filepath.Join(o.DataDir, "certificates")
	}
}

// Validate returns every problem with the options at once.
func (o *Options) Validate() []error {
	var errs []error
	recommended := o.Recommended.Validate()
	if o.Standalone() && o.embeddedEtcd() {
		// The embedded etcd supplies the servers; drop the complaint.
		recommended = dropEtcdServersError(recommended)
	}
	errs = append(errs, recommended...)
	errs = append(errs, o.WatchCache.Validate()...)
	if err := o.WatchCache.ValidateServed(registry.Served()); err != nil {
		errs = append(errs, err)
	}
	for _, err := range logsapi.Validate(o.Logs, utilfeature.DefaultFeatureGate, nil) {
		errs = append(errs, fmt.Errorf("logs: %w", err))
	}
	if g := o.ShutdownWatchTerminationGracePeriod; g < 0 || g > time.Minute {
		errs = append(errs, fmt.Errorf("--shutdown-watch-termination-grace-period=%v: must be between 0 and 1m (the HTTP server's shutdown timeout)", g))
	}
	if err := wkoptions.ValidateDecorator(o.Decorator); err != nil {
		errs = append(errs, err)
	}
	if o.Standalone() && o.DataDir == "" {
		errs = append(errs, fmt.Errorf("--data-dir must not be empty in standalone mode"))
	}
	errs = append(errs, o.validateStandaloneAuth()...)
	return errs
}

func dropEtcdServersError(errs []error) []error {
	out := errs[:0]
	for _, err := range errs {
		if err.Error() != "--etcd-servers must be specified" {
			out = append(out, err)
		}
	}
	return out
}

// validateStandaloneAuth reads the token and policy files, so a typo stops
// the server before it binds a port rather than locking users out later.
func (o *Options) validateStandaloneAuth() []error {
	var errs []error
	if !o.Standalone() {
		for _, f := range []struct{ flag, value string }{
			{"--token-auth-file", o.TokenAuthFile},
			{"--authorization-policy-file", o.AuthorizationPolicyFile},
		} {
			if f.value != "" {
				errs = append(errs, fmt.Errorf("%s applies to standalone mode only: aggregated, authentication and authorization are delegated to the cluster", f.flag))
			}
		}
		return errs
	}
	if o.TokenAuthFile != "" {
		_, tokenErrs := loadTokenFile(o.TokenAuthFile)
		errs = append(errs, tokenErrs...)
	}
	if o.AuthorizationPolicyFile != "" {
		_, policyErrs := loadPolicyFile(o.AuthorizationPolicyFile)
		errs = append(errs, policyErrs...)
	}
	return errs
}
