// Package httpbench runs the HTTP-level benchmark scenarios: the sample
// apiserver started as a child process with one watch cache decorator, a
// client in this process driving watches over HTTP/2, and the server's own
// CPU and memory measured from outside (/proc) and from its /metrics.
//
// Each scenario starts and stops its own server, on a fresh etcd prefix, so
// runs never see each other's objects or caches.
package httpbench

import (
	"errors"
	"fmt"
	"os"
)

// Env is what a scenario needs from the bench driver.
type Env struct {
	EtcdEndpoint string // an etcd already running in a separate process, e.g. http://127.0.0.1:PORT
	ServerBinary string // the sample apiserver built with `go build -o X ./sample-apiserver`
	WorkDir      string // a scratch directory you may use
	// Quick shortens the settle and drain waits; the sizes are the caller's.
	Quick bool
	// ServerCPUProfile, when set, is where the fan-out saves a CPU profile
	// of the server (its /debug/pprof) over the first serverProfileSeconds
	// of the writes: the client's own profile cannot say where the
	// server's time goes.
	ServerCPUProfile string
}

func (e Env) validate() error {
	var errs []error
	if e.EtcdEndpoint == "" {
		errs = append(errs, errors.New("EtcdEndpoint is empty"))
	}
	if e.ServerBinary == "" {
		errs = append(errs, errors.New("ServerBinary is empty"))
	} else if _, err := os.Stat(e.ServerBinary); err != nil {
		errs = append(errs, fmt.Errorf("ServerBinary: %w", err))
	}
	if e.WorkDir == "" {
		errs = append(errs, errors.New("WorkDir is empty"))
	}
	return errors.Join(errs...)
}

func checkDecorator(d string) error {
	switch d {
	case "watchkeeper", "upstream", "none":
		return nil
	}
	return fmt.Errorf("decorator %q: must be watchkeeper, upstream or none", d)
}
