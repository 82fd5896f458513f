package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/apiserver/pkg/util/compatibility"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"
	netutils "k8s.io/utils/net"

	"github.com/watchkeeper/watchkeeper/cacher"
	"github.com/watchkeeper/watchkeeper/debugview"
	"github.com/watchkeeper/watchkeeper/decorator"
	wkoptions "github.com/watchkeeper/watchkeeper/options"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo"
	demoopenapi "github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/generated/openapi"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/registry"
)

// Server is a running sample apiserver.
type Server struct {
	Generic *genericapiserver.GenericAPIServer
	// KubeconfigPath is the admin kubeconfig written in standalone mode.
	KubeconfigPath string
	// URL is where it serves.
	URL string

	stopEtcd func()
	// decorator made the server's caches; nil without a cache.
	decorator *decorator.Decorator
	// watchGrace is how long watches go on once the server is told to stop.
	watchGrace time.Duration
}

// Run builds the server from validated options and serves until ctx ends.
func Run(ctx context.Context, o *Options, out io.Writer) error {
	s, err := New(o, out)
	if err != nil {
		return err
	}
	defer s.Close()
	return s.Run(ctx)
}

// Run serves until ctx ends. Then it sends every watchkeeper watch a
// bookmark at its cache's RV before the generic server stops (so clients
// resume from there), and after the watch termination grace period ends
// every watchkeeper watch (each after its client read what is queued), so
// the generic server's shutdown does not wait out its 60s timeout for them
// and their clients resume elsewhere at once.
func (s *Server) Run(ctx context.Context) error {
	if d := s.decorator; d != nil {
		var stop func()
		ctx, stop = d.WatchesOnShutdown(ctx, s.watchGrace)
		defer stop()
	}
	return s.Generic.PrepareRun().RunWithContext(ctx)
}

// New builds the server: the embedded etcd when standalone needs one, the
// generic apiserver config, watchkeeper as every resource's storage
// decorator, and the demo API group.
func New(o *Options, out io.Writer) (_ *Server, err error) {
	s := &Server{stopEtcd: func() {}}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	standalone := o.Standalone()
	if standalone {
		// First, so that nothing written below (etcd's data, the
		// certificate's key, the token) ever sits in a directory others can
		// list: the certificate writer would create it 0755.
		if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
			return nil, err
		}
	}
	if standalone && o.embeddedEtcd() {
		e, err := startEmbeddedEtcd(filepath.Join(o.DataDir, "etcd"))
		if err != nil {
			return nil, err
		}
		s.stopEtcd = e.Stop
		o.Recommended.Etcd.StorageConfig.Transport.ServerList = e.Endpoints()
	}

	name := o.Decorator
	if !o.Recommended.Etcd.EnableWatchCache {
		name = wkoptions.DecoratorNone
	}
	d, err := decorator.Choose(name, o.WatchCache)
	if err != nil {
		return nil, err
	}

	if err := o.Recommended.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", nil,
		[]net.IP{netutils.ParseIPSloppy("127.0.0.1")}); err != nil {
		return nil, fmt.Errorf("creating the self-signed certificate: %w", err)
	}
	config := genericapiserver.NewRecommendedConfig(Codecs)
	config.EffectiveVersion = compatibility.DefaultBuildEffectiveVersion()
	config.FeatureGate = utilfeature.DefaultFeatureGate
	namer := openapi.NewDefinitionNamer(Scheme)
	config.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(demoopenapi.GetOpenAPIDefinitions, namer)
	config.OpenAPIConfig.Info.Title, config.OpenAPIConfig.Info.Version = "watchkeeper demo", "v1alpha1"
	config.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(demoopenapi.GetOpenAPIDefinitions, namer)
	config.OpenAPIV3Config.Info.Title, config.OpenAPIV3Config.Info.Version = "watchkeeper demo", "v1alpha1"

	recommended := *o.Recommended
	var token string
	if standalone {
		// Nothing to delegate to: authentication is the admin token,
		// authorization is system:masters, and the pieces that need the core
		// API (admission webhooks, priority and fairness) are off.
		recommended.Authentication, recommended.Authorization = nil, nil
		recommended.CoreAPI, recommended.Admission = nil, nil
		features := *recommended.Features
		features.EnablePriorityAndFairness = false
		recommended.Features = &features
		klog.InfoS("Standalone mode: admission webhooks and API priority and fairness are off (they need a core Kubernetes API); authentication is the admin token in the data directory and --token-auth-file, authorization system:masters and --authorization-policy-file")
	}
	if err := recommended.ApplyTo(config); err != nil {
		return nil, err
	}
	if standalone {
		if token, err = loadOrCreateToken(filepath.Join(o.DataDir, "admin-token")); err != nil {
			return nil, err
		}
		var fileTokens authenticator.Token
		if o.TokenAuthFile != "" {
			var errs []error
			if fileTokens, errs = loadTokenFile(o.TokenAuthFile); len(errs) > 0 {
				return nil, errors.Join(errs...)
			}
			klog.InfoS("Standalone mode: users of the token file authenticate too", "tokenAuthFile", o.TokenAuthFile)
		}
		authz := standaloneAuthorizer{}
		if o.AuthorizationPolicyFile != "" {
			var errs []error
			if authz.policy, errs = loadPolicyFile(o.AuthorizationPolicyFile); len(errs) > 0 {
				return nil, errors.Join(errs...)
			}
			klog.InfoS("Standalone mode: the policy file grants access beyond system:masters",
				"authorizationPolicyFile", o.AuthorizationPolicyFile, "rules", len(authz.policy.rules))
		}
		config.Authentication.Authenticator = standaloneAuthenticator(token, fileTokens)
		config.Authorization.Authorizer = authz
	}
	switch name {
	case wkoptions.DecoratorNone:
		klog.InfoS("No watch cache: resources are served straight from etcd")
	case wkoptions.DecoratorUpstream:
		// For side-by-side measurements: the same server with upstream's
		// cache, its readiness checked the same way.
		klog.InfoS("Using upstream's watch cache (registry.StorageWithCacher) instead of watchkeeper")
	}
	// The one line that makes watchkeeper every resource's watch cache.
	config.RESTOptionsGetter = decorator.Install(config.RESTOptionsGetter, d)

	gs, err := config.Complete().New("watchkeeper-sample-apiserver", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, err
	}
	s.Generic = gs
	storageMap, err := registry.NewStorage(Scheme, config.RESTOptionsGetter)
	if err != nil {
		return nil, err
	}
	group := genericapiserver.NewDefaultAPIGroupInfo(demo.GroupName, Scheme, metav1.ParameterCodec, Codecs)
	group.VersionedResourcesStorageMap["v1alpha1"] = storageMap
	if err := gs.InstallAPIGroup(&group); err != nil {
		return nil, err
	}
	var caches debugview.Source = noCaches{}
	if d != nil && name == wkoptions.DecoratorWatchkeeper {
		s.decorator, s.watchGrace = d, o.ShutdownWatchTerminationGracePeriod
	}
	if d != nil {
		caches = d
		if err := gs.AddReadyzChecks(healthz.NamedCheck("watch-caches", func(*http.Request) error { return d.ReadinessCheck() })); err != nil {
			return nil, err
		}
	}
	// Behind the server's authentication and authorization like every
	// non-resource path: in standalone mode, the admin only.
	gs.Handler.NonGoRestfulMux.Handle(DebugPath, debugview.Handler(caches))

	host := "127.0.0.1"
	if a := o.Recommended.SecureServing.BindAddress; a != nil && !a.IsUnspecified() {
		host = a.String()
	}
	s.URL = "https://" + net.JoinHostPort(host, strconv.Itoa(o.Recommended.SecureServing.BindPort))
	if standalone {
		if err := s.writeKubeconfig(o, token, out); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Close stops what New started outside the generic server (the embedded
// etcd). The generic server stops with its context.
func (s *Server) Close() { s.stopEtcd() }

func (s *Server) writeKubeconfig(o *Options, token string, out io.Writer) error {
	certFile := o.Recommended.SecureServing.ServerCert.CertKey.CertFile
	if certFile == "" {
		certFile = filepath.Join(o.Recommended.SecureServing.ServerCert.CertDirectory, o.Recommended.SecureServing.ServerCert.PairName+".crt")
	}
	// The self-signed certificate file holds the serving certificate and
	// the CA that signed it; trusting the file trusts the server.
	caData, err := os.ReadFile(certFile)
	if err != nil {
		return fmt.Errorf("reading the serving certificate for the kubeconfig: %w", err)
	}
	path, err := filepath.Abs(filepath.Join(o.DataDir, "admin.kubeconfig"))
	if err != nil {
		return err
	}
	if err := writeAdminKubeconfig(path, s.URL, caData, token); err != nil {
		return err
	}
	s.KubeconfigPath = path
	fmt.Fprintf(out, "\nwatchkeeper sample apiserver: serving %s\nadmin kubeconfig: %s\ntry:\n  export KUBECONFIG=%s\n  kubectl api-resources --api-group=%s\n\n",
		s.URL, path, path, demo.GroupName)
	return nil
}

// DebugPath serves watchkeeper's view into its caches (debugview).
const DebugPath = "/debug/watchkeeper"

// noCaches is the debug view's source when the server runs no cache.
type noCaches struct{}

func (noCaches) Caches() []*cacher.Cacher { return nil }
