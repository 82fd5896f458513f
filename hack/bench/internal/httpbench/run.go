package httpbench

import (
	"context"
	"fmt"
	"time"
)

// Level is the result level of every figure of this package.
const Level = "http"

// settle is how long a scenario lets the server sit after opening its
// watches and before measuring: the openings' garbage, timers and
// goroutines come and go in that time.
func settle(env Env) time.Duration {
	if env.Quick {
		return time.Second
	}
	return 3 * time.Second
}

// withServer runs fn against a sample apiserver of its own and stops the
// server however fn ends (error, panic, ctx). A run that went well leaves
// nothing behind; a failed one keeps its scratch dir, whose log the error
// names.
func withServer(ctx context.Context, env Env, scenario, decorator string, fn func(*serverProcess) error) error {
	if err := raiseFDLimit(); err != nil {
		return err
	}
	s, err := startServer(ctx, env, scenario, decorator)
	if err != nil {
		return fmt.Errorf("%s/%s: %w", scenario, decorator, err)
	}
	defer s.Stop()
	if err := fn(s); err != nil {
		return fmt.Errorf("%s/%s: %w (server log %s)", scenario, decorator, err, s.LogPath)
	}
	s.Stop()
	s.cleanup()
	return nil
}
