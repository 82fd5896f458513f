package integration

import (
	"context"
	"io"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/wait"
	etcd3metrics "k8s.io/apiserver/pkg/storage/etcd3/metrics"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/watchkeeper/watchkeeper/internal/etcdtest"
	"github.com/watchkeeper/watchkeeper/internal/fixtures"
	"github.com/watchkeeper/watchkeeper/internal/freeport"
	"github.com/watchkeeper/watchkeeper/internal/testchild"
	"github.com/watchkeeper/watchkeeper/options"
	clientset "github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/generated/clientset/versioned"
	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/server"
)

// sampleServer is the sample apiserver running in this test process,
// standalone on its own embedded etcd in a temporary data directory.
type sampleServer struct {
	URL        string
	Kubeconfig string
	// Admin is a client config carrying the admin token.
	Admin  *rest.Config
	Client clientset.Interface
	// Anonymous talks TLS to the server with no credentials.
	Anonymous *rest.Config
	// Stop shuts the server down (and its embedded etcd); the test's end
	// does it too.
	Stop func()
}

// startSampleServer parses args as the binary would, on top of a free port
// and a fresh data directory, and serves until the test ends.
func startSampleServer(t *testing.T, args ...string) *sampleServer {
	t.Helper()
	var s *server.Server
	// A free port can be taken by another process between the probe and
	// the server's bind: then another port, a few times. k8s.io/apiserver's
	// serving options format the bind error (%v): only its text says so.
	for attempt := 1; ; attempt++ {
		var err error
		if s, err = buildSampleServer(t, args); err == nil {
			break
		} else if !strings.Contains(err.Error(), syscall.EADDRINUSE.Error()) || attempt == 3 {
			t.Fatalf("building the server: %v", err)
		}
		t.Logf("building the server, attempt %d: %v; again on another port", attempt, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	stop := sync.OnceFunc(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Errorf("sample apiserver did not stop within 60s")
		}
		s.Close()
	})
	t.Cleanup(stop)

	admin, err := clientcmd.BuildConfigFromFlags("", s.KubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	admin.QPS, admin.Burst = -1, 0 // no client-side throttling in tests
	anonymous := rest.AnonymousClientConfig(admin)
	client, err := clientset.NewForConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	ss := &sampleServer{URL: s.URL, Kubeconfig: s.KubeconfigPath, Admin: admin, Client: client, Anonymous: anonymous, Stop: stop}
	ss.waitReady(t)
	return ss
}

// newInProcessServer builds a sample apiserver to run in this test process.
//
// Building it sets the storage monitor behind etcd_db_total_size_in_bytes
// (k8s.io/apiserver's options/etcd.go): a process-wide getter whose monitors
// are closed with the server only if something gathered them while it ran.
// Otherwise, once the server and its etcd are gone, every gather of the
// default registry in the process (a test's metricValue, another in-process
// server's /metrics) dials the gone etcd and waits out a 20s dial timeout:
// TestMetrics once took 182s that way, and its watch outlived its context.
// No test reads that metric, and a process runs one server outside tests,
// so in-process servers leave it unset.
func newInProcessServer(t *testing.T, o *server.Options) *server.Server {
	t.Helper()
	s, err := newInProcessServerOrError(o)
	if err != nil {
		t.Fatalf("building the server: %v", err)
	}
	return s
}

func newInProcessServerOrError(o *server.Options) (*server.Server, error) {
	s, err := server.New(o, io.Discard)
	if err != nil {
		return nil, err
	}
	etcd3metrics.SetStorageMonitorGetter(func() ([]etcd3metrics.Monitor, error) { return nil, nil })
	return s, nil
}

// buildSampleServer parses args as the binary would, on top of a free port
// and a fresh data directory, and builds the server.
func buildSampleServer(t *testing.T, args []string) (*server.Server, error) {
	t.Helper()
	port := freeLoopbackPort(t)
	o := server.NewOptions()
	fs := pflag.NewFlagSet("sample-apiserver", pflag.ContinueOnError)
	for _, f := range o.Flags().FlagSets {
		fs.AddFlagSet(f)
	}
	all := append([]string{"--data-dir=" + etcdtest.DataDir(t), "--secure-port=" + strconv.Itoa(port)}, args...)
	if fixtures.CompactTests() {
		all = append([]string{"--" + options.FlagCompact}, all...)
	}
	if err := fs.Parse(all); err != nil {
		t.Fatalf("parsing %v: %v", all, err)
	}
	o.Complete()
	if errs := o.Validate(); len(errs) > 0 {
		t.Fatalf("options %v: %v", all, errs)
	}
	return newInProcessServerOrError(o)
}

func (s *sampleServer) waitReady(t *testing.T) {
	t.Helper()
	rc, err := rest.UnversionedRESTClientFor(withNegotiation(s.Admin))
	if err != nil {
		t.Fatal(err)
	}
	var last error
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, last = rc.Get().AbsPath("/readyz").DoRaw(ctx)
		return last == nil, nil
	}); err != nil {
		t.Fatalf("sample apiserver not ready after 60s: %v (%v)", last, err)
	}
}

// withNegotiation fills what a raw REST client needs to decode statuses.
func withNegotiation(c *rest.Config) *rest.Config {
	c = rest.CopyConfig(c)
	c.NegotiatedSerializer = server.Codecs.WithoutConversion()
	c.GroupVersion = nil
	c.APIPath = "/apis"
	return c
}

func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	port, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// A stopped in-process server leaves nothing behind that a later gather of
// the default registry waits on (newInProcessServer). It gathers nothing
// while the server runs: a gather then would have closed the monitors with
// the server and hidden the wait. A gather takes milliseconds; the wait it
// guards against is the 20s dial timeout, so 10s tells them apart on any
// machine.
func TestStoppedServerLeavesGathersFast(t *testing.T) {
	t.Parallel() // in a process of its own: it gathers the process's registry
	if !testchild.Isolate(t) {
		return
	}
	s := startSampleServer(t)
	s.Stop()
	start := time.Now()
	if _, err := legacyregistry.DefaultGatherer.Gather(); err != nil {
		t.Fatalf("gathering the default registry: %v", err)
	}
	took := time.Since(start)
	t.Logf("a gather after the server stopped took %v", took.Round(time.Millisecond))
	if took > 10*time.Second {
		t.Errorf("a gather after the server stopped took %v: it waited on the stopped server's etcd", took)
	}
}
