package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/httpbench"
	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
)

// httpLevelAvailable is whether this build can run the http level.
const httpLevelAvailable = true

// httpLevelScenarios are the scenarios package httpbench provides.
var httpLevelScenarios = scenarioFuncs[httpbench.Env]{
	idle:      httpbench.Idle,
	bookmarks: httpbench.Bookmarks,
	fanout:    httpbench.FanOut,
}

// runHTTPScenario runs one http-level scenario in this child: package
// httpbench starts the sample apiserver with the decorator and drives it.
func runHTTPScenario(ctx context.Context, c childFlags) ([]result.Result, error) {
	env := httpbench.Env{EtcdEndpoint: c.etcd, ServerBinary: c.serverBinary, WorkDir: c.workDir, Quick: c.quick}
	if c.cpuProfile != "" {
		// The child's own profile is the client's; the server's goes beside it.
		env.ServerCPUProfile = strings.TrimSuffix(c.cpuProfile, ".pprof") + ".server.pprof"
	}
	if rs, ok, err := httpLevelScenarios.run(ctx, env, c.spec); ok {
		return rs, err
	}
	return nil, fmt.Errorf("no http scenario %q", c.spec.Scenario)
}
