package httpbench

import (
	"context"
	"fmt"
	"net/http"
	"os"
)

// serverProfileSeconds is how much of the write phase the server's CPU
// profile covers: the fan-out's 1,000 x 1,000 takes 10-15 s on two cores.
const serverProfileSeconds = 8

// profileServer starts fetching a CPU profile of s's process from its
// /debug/pprof (the generic apiserver serves it; --profiling is on by
// default) and writes it to path. The channel gets the outcome once the
// profile is saved; with no path it gets nil at once.
func profileServer(ctx context.Context, s *serverProcess, path string) <-chan error {
	done := make(chan error, 1)
	if path == "" {
		done <- nil
		return done
	}
	go func() {
		code, body, err := s.Get(ctx, fmt.Sprintf("/debug/pprof/profile?seconds=%d", serverProfileSeconds))
		switch {
		case err != nil:
			done <- fmt.Errorf("server CPU profile: %w", err)
		case code != http.StatusOK:
			done <- fmt.Errorf("server CPU profile: %d %s", code, body)
		default:
			done <- os.WriteFile(path, body, 0o644)
		}
	}()
	return done
}
