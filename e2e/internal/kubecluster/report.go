package kubecluster

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Report prints a line per step and counts them.
type Report struct {
	// Name starts the closing line; "" is "e2e".
	Name           string
	Passed, Failed int
}

// Step runs f and prints PASS or FAIL with f's figure or error. It returns
// whether f succeeded.
func (r *Report) Step(name string, f func() (string, error)) bool {
	start := time.Now()
	figure, err := f()
	took := time.Since(start).Round(10 * time.Millisecond)
	if err != nil {
		r.Failed++
		fmt.Printf("FAIL %s: %v [%v]\n", name, err, took)
		return false
	}
	r.Passed++
	fmt.Printf("PASS %s: %s [%v]\n", name, figure, took)
	return true
}

// Close prints the time and the closing line, alone on its line as CI
// reads it, and returns the exit code.
func (r *Report) Close(start time.Time) int {
	name := r.Name
	if name == "" {
		name = "e2e"
	}
	fmt.Printf("%s took %v\n", name, time.Since(start).Round(100*time.Millisecond))
	fmt.Printf("%s: %d passed, %d failed\n", name, r.Passed, r.Failed)
	if r.Failed > 0 {
		return 1
	}
	return 0
}

// OneLine joins a command's output lines with "; ".
func OneLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	return strings.Join(lines, "; ")
}

// Main is a driver's main after its flags are parsed: it makes each of
// paths absolute (the driver's children run in other directories), runs run
// with a context that ends on Ctrl-C or SIGTERM, and exits with run's code.
func Main(run func(ctx context.Context) int, paths ...*string) {
	for _, p := range paths {
		abs, err := filepath.Abs(*p)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		*p = abs
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx)
	stop()
	os.Exit(code)
}
