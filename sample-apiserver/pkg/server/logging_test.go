package server

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
)

// Only the generic server's info entries are dropped during a shutdown: its
// warnings and errors show, as does everyone else's info.
func TestQuietOnShutdownDropsOnlyGenericServerInfo(t *testing.T) {
	const generic = "k8s.io/apiserver/pkg/server/dynamiccertificates.(*DynamicServingCertificateController).Run"
	for _, tc := range []struct {
		entry, caller string
		quiet         bool
	}{
		{`I1201 15:04:40.368616   26002 dynamic_serving_content.go:149] "Shutting down controller"`, generic, true},
		{`I1201 15:04:40.368734   26002 secure_serving.go:264] Stopped listening on 127.0.0.1:1`, "k8s.io/apiserver/pkg/server.RunServer.func1", true},
		{`W1201 15:04:40.368734   26002 secure_serving.go:1] a warning`, generic, false},
		{`E1201 15:04:40.368734   26002 secure_serving.go:1] "an error" err="boom"`, generic, false},
		{`I1201 15:04:40.379104   26002 etcd.go:31] "Embedded etcd stopped"`, thisPackage + "embeddedEtcd.Stop", false},
		{`I1201 15:04:40.379104   26002 x.go:1] "other"`, "k8s.io/apiextensions-apiserver/pkg/x.f", false},
		{`{"ts":1,"v":0,"msg":"JSON"}`, generic, false},
		{``, generic, false},
	} {
		if got := quietOnShutdown([]byte(tc.entry), tc.caller); got != tc.quiet {
			t.Errorf("%q from %s: quiet = %v, want %v", tc.entry, tc.caller, got, tc.quiet)
		}
	}
}

// The call site is found through each way a line reaches the output:
// contextual (logr) calls, klog's structured calls and its printf-style
// calls, which klog formats itself (WriteKlogBuffer).
func TestLogCallSiteIsTheLoggingCall(t *testing.T) {
	var sites []string
	rec := shutdownQuietRecorder{&sites}
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(rec)))
	logger.Info("contextual")
	logger.Error(errors.New("boom"), "contextual error")
	klog.SetLoggerWithOptions(logger, klog.WriteKlogBuffer(logger.GetSink().(textlogger.KlogBufferWriter).WriteKlogBuffer))
	defer klog.ClearLogger()
	klog.InfoS("structured")
	klog.Infof("printf-style %d", 1)
	klog.ErrorS(errors.New("boom"), "structured error")
	if len(sites) != 5 {
		t.Fatalf("%d entries written, want 5", len(sites))
	}
	for i, site := range sites {
		if site != thisPackage+"TestLogCallSiteIsTheLoggingCall" {
			t.Errorf("entry %d: call site %q, want this test", i, site)
		}
	}
}

// Before the stop nothing is dropped; after it, this package's lines still
// show.
func TestShutdownQuietWritesAllButTheGenericServersInfo(t *testing.T) {
	var out bytes.Buffer
	stopping := make(chan struct{})
	q := shutdownQuiet{out: &out, stopping: stopping}
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(q)))
	logger.Info("before the stop")
	close(stopping)
	logger.Info("after the stop")
	logger.Error(errors.New("boom"), "an error after the stop")
	if got := strings.Count(out.String(), "\n"); got != 3 {
		t.Errorf("wrote %d lines, want 3:\n%s", got, out.String())
	}
}

// shutdownQuietRecorder records the call site of each entry, from where
// shutdownQuiet looks for it (its name makes logCallSite skip it, as it
// skips shutdownQuiet).
type shutdownQuietRecorder struct{ sites *[]string }

func (r shutdownQuietRecorder) Write(p []byte) (int, error) {
	*r.sites = append(*r.sites, logCallSite())
	return len(p), nil
}
