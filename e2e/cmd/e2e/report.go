package main

import (
	"fmt"
	"strings"
	"time"
)

// report prints a line per step and counts them.
type report struct{ passed, failed int }

// step runs f and prints PASS or FAIL with f's figure or error. It returns
// whether f succeeded.
func (r *report) step(name string, f func() (string, error)) bool {
	start := time.Now()
	figure, err := f()
	took := time.Since(start).Round(10 * time.Millisecond)
	if err != nil {
		r.failed++
		fmt.Printf("FAIL %s: %v [%v]\n", name, err, took)
		return false
	}
	r.passed++
	fmt.Printf("PASS %s: %s [%v]\n", name, figure, took)
	return true
}

// close prints the time and the closing line, alone on its line as CI
// reads it, and returns the exit code.
func (r *report) close(start time.Time) int {
	fmt.Printf("e2e took %v\n", time.Since(start).Round(100*time.Millisecond))
	fmt.Printf("e2e: %d passed, %d failed\n", r.passed, r.failed)
	if r.failed > 0 {
		return 1
	}
	return 0
}

// oneLine joins a command's output lines with "; ".
func oneLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	return strings.Join(lines, "; ")
}
