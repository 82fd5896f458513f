package server

import (
	"io"
	"runtime"
	"strings"
)

// shutdownQuiet is the sample apiserver's log output at -v=0 in the text
// format. Once the server is told to stop (Ctrl-C, SIGTERM), it drops the
// info lines k8s.io/apiserver writes about its own orderly shutdown: each
// controller, listener and tracker saying that it stopped ("Shutting down
// controller", "Stopped listening on ...", "StorageObjectCountTracker
// pruner is exiting", "Shutting down DynamicServingCertificateController").
// They are klog.Info calls at V(0) in the generic server, which we cannot
// move to V(1) there, and they said nothing a user who pressed Ctrl-C did
// not know: a clean shutdown should say one line, our "Embedded etcd
// stopped".
//
// What it drops is narrow on purpose, so that nothing that matters is
// hidden: only info lines (a warning or an error shows, whoever logs it,
// whenever), only once the stop began (the same lines at any other time
// show), only those whose logging call is in a k8s.io/apiserver package
// (ours and every other library's show), and only at -v=0: from -v=1 the
// output is not wrapped at all, and they show again.
type shutdownQuiet struct {
	out io.Writer
	// stopping is closed when the server is told to stop.
	stopping <-chan struct{}
}

// Write gets one log entry per call, as klog's text logger writes them:
// "I1201 15:04:40.368734   26002 secure_serving.go:264] Stopped ...".
func (q shutdownQuiet) Write(p []byte) (int, error) {
	select {
	case <-q.stopping:
		if quietOnShutdown(p, logCallSite()) {
			return len(p), nil
		}
	default:
	}
	return q.out.Write(p)
}

// quietOnShutdown says whether a log entry written during the shutdown,
// logged from the function caller, is one shutdownQuiet drops: an info
// entry from the generic server.
func quietOnShutdown(entry []byte, caller string) bool {
	return len(entry) > 0 && entry[0] == 'I' && strings.HasPrefix(caller, "k8s.io/apiserver/")
}

const thisPackage = "github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/server."

// logCallSite is the function that made the logging call being written: the
// first frame of the stack outside the logging libraries (klog, its text
// logger, logr, component-base's stream router) and this file.
func logCallSite() string {
	var pcs [32]uintptr
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs[:])])
	for {
		f, more := frames.Next()
		switch {
		case strings.HasPrefix(f.Function, "k8s.io/klog/"),
			strings.HasPrefix(f.Function, "github.com/go-logr/"),
			strings.HasPrefix(f.Function, "k8s.io/component-base/logs/"),
			strings.HasPrefix(f.Function, thisPackage) && strings.Contains(f.Function, "shutdownQuiet"):
		default:
			return f.Function
		}
		if !more {
			return ""
		}
	}
}
