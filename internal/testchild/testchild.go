// Package testchild runs one test in a child process of its test binary.
//
// Some tests read or set what a process has only one of: the default
// metrics registry, feature gates, the goroutine count, the live heap; or
// they may crash the process on the bug they look for. Run in a child, such a
// test has the process to itself, so the parent can run it beside other
// tests instead of in the serial phase that go test gives unmarked tests.
package testchild

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// envVar names the test a child process is to run as itself.
const envVar = "WATCHKEEPER_TEST_CHILD"

// defaultTimeout bounds a child when the parent has no -test.timeout.
const defaultTimeout = 10 * time.Minute

// Isolate reports whether the caller is the child process that must run
// t's body. In the parent it runs t alone in a child process and fails t
// when the child fails, crashes, times out or runs no such test; the caller
// then returns. A test that calls t.Parallel first runs beside the others.
//
//	t.Parallel()
//	if !testchild.Isolate(t) {
//		return
//	}
func Isolate(t *testing.T) bool {
	t.Helper()
	if os.Getenv(envVar) == t.Name() {
		return true
	}
	timeout := defaultTimeout
	if d, ok := t.Deadline(); ok {
		// The child's own timeout comes first, so that a hang ends with
		// the child's goroutine dump rather than the parent's.
		timeout = time.Until(d) - 30*time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout+15*time.Second)
	defer cancel()
	args := []string{"-test.run=" + runPattern(t.Name()), "-test.count=1", "-test.v", "-test.timeout=" + timeout.String()}
	if f := flag.Lookup("test.parallel"); f != nil {
		args = append(args, "-test.parallel="+f.Value.String()) // the child's own parallel subtests
	}
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), envVar+"="+t.Name())
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start).Round(time.Millisecond)
	switch {
	case err != nil:
		t.Errorf("the test failed in its child process after %v (%v):\n%s", took, err, excerpt(out))
	case !bytes.Contains(out, []byte("--- PASS: "+t.Name()+" ")):
		// A child that ran nothing (a -run pattern that matched no test, a
		// renamed test) exits 0 too: that is no pass.
		t.Errorf("the child process did not run and pass %s:\n%s", t.Name(), excerpt(out))
	default:
		t.Logf("passed in a child process in %v", took)
	}
	return false
}

// runPattern matches exactly the test named name: -test.run splits its
// pattern at slashes, one part per level of subtest.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// What a failed child's output adds to the parent's, in bounds: first the
// lines each failed test wrote, so that a failure deep in a long run is never
// among what is left out; then the test's own lines (the run and result
// lines, and t.Log's, which -test.v indents with spaces), leaving out the
// server's logs between them; and a panic (a crash, a timeout) with the
// first of its stacks.
const (
	excerptHead  = 40
	excerptTail  = 200
	excerptPanic = 60
	// A failed test's last lines hold its failure: t.Error comes after the
	// t.Log lines that lead to it.
	excerptFailedTests = 20
	excerptFailedLines = 30
)

func excerpt(out []byte) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	var own, failed []string
	wrote := map[string][]string{} // test -> its indented lines
	current := ""                  // the test -test.v last named
	panicAt := -1
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, "=== "), strings.HasPrefix(strings.TrimLeft(l, " "), "--- "):
			own = append(own, l)
			// "=== RUN   name", "--- FAIL: name (1.2s)" (indented for a
			// subtest): what follows is the named test's, up to the next
			// such line.
			if f := strings.Fields(l); len(f) >= 3 {
				current = f[2]
				if f[1] == "FAIL:" && !slices.Contains(failed, current) {
					failed = append(failed, current)
				}
			}
		case strings.HasPrefix(l, " "):
			own = append(own, l)
			wrote[current] = append(wrote[current], l)
		case panicAt < 0 && strings.HasPrefix(l, "panic: "):
			panicAt = i
		}
	}
	// Subtests first, the deepest first: a parent fails with its subtests,
	// and its own last lines are often a summary of them.
	slices.SortStableFunc(failed, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	var b strings.Builder
	if len(failed) > 0 {
		fmt.Fprintf(&b, "failed: %d tests; the last lines of each:\n", len(failed))
		for i, name := range failed {
			if i == excerptFailedTests {
				fmt.Fprintf(&b, "... and %d more failed tests ...\n", len(failed)-i)
				break
			}
			w := wrote[name]
			fmt.Fprintf(&b, "--- FAIL: %s\n", name)
			if len(w) > excerptFailedLines {
				fmt.Fprintf(&b, "    ... %d lines left out ...\n", len(w)-excerptFailedLines)
				w = w[len(w)-excerptFailedLines:]
			}
			for _, l := range w {
				b.WriteString(l + "\n")
			}
		}
		b.WriteString("the whole run:\n")
	}
	if len(own) > excerptHead+excerptTail {
		fmt.Fprintf(&b, "%s\n... %d lines left out ...\n", strings.Join(own[:excerptHead], "\n"), len(own)-excerptHead-excerptTail)
		own = own[len(own)-excerptTail:]
	}
	b.WriteString(strings.Join(own, "\n"))
	if panicAt >= 0 {
		end := min(panicAt+excerptPanic, len(lines))
		fmt.Fprintf(&b, "\n%s", strings.Join(lines[panicAt:end], "\n"))
	}
	return b.String()
}
