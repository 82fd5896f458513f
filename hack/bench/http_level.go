package main

import (
	"context"
	"fmt"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/httpbench"
	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
)

// httpLevelAvailable is whether this build can run the http level.
const httpLevelAvailable = true

// runHTTPScenario runs one http-level scenario in this child: package
// httpbench starts the sample apiserver with the decorator and drives it.
func runHTTPScenario(ctx context.Context, c childFlags) ([]result.Result, error) {
	env := httpbench.Env{EtcdEndpoint: c.etcd, ServerBinary: c.serverBinary, WorkDir: c.workDir, Quick: c.quick}
	r := c.spec
	switch r.Scenario {
	case "idle":
		return httpbench.Idle(ctx, env, r.Decorator, r.Watchers)
	case "bookmarks":
		return httpbench.Bookmarks(ctx, env, r.Decorator, r.Watchers, r.Period)
	case "fanout":
		return httpbench.FanOut(ctx, env, r.Decorator, r.Watchers, r.Events)
	}
	return nil, fmt.Errorf("no http scenario %q", r.Scenario)
}
