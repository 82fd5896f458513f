package testchild

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// selfTestEnv makes the fixture tests below run: TestIsolate runs each in a
// process of its own, where Isolate starts a child in turn.
const selfTestEnv = "WATCHKEEPER_TESTCHILD_SELFTEST"

func fixture(t *testing.T) {
	t.Helper()
	if os.Getenv(selfTestEnv) == "" {
		t.Skip("a fixture of TestIsolate, which runs it")
	}
}

func TestFixturePasses(t *testing.T) {
	fixture(t)
	t.Parallel()
	if !Isolate(t) {
		return
	}
	if got := os.Getenv(envVar); got != t.Name() {
		t.Fatalf("body runs with %s=%q, want %q", envVar, got, t.Name())
	}
}

func TestFixtureFails(t *testing.T) {
	fixture(t)
	t.Parallel()
	if !Isolate(t) {
		return
	}
	t.Error("the fixture's own failure")
}

func TestFixturePanics(t *testing.T) {
	fixture(t)
	t.Parallel()
	if !Isolate(t) {
		return
	}
	panic("the fixture's own panic")
}

// TestFixtureFailsAmongMany fails in one parallel subtest of many, whose
// lines fall far from the head and the tail of the run.
func TestFixtureFailsAmongMany(t *testing.T) {
	fixture(t)
	t.Parallel()
	if !Isolate(t) {
		return
	}
	for i := range 300 {
		t.Run(fmt.Sprintf("case-%03d", i), func(t *testing.T) {
			t.Parallel()
			t.Logf("case %d ran", i)
			if i == 100 {
				t.Error("the needle among the cases")
			}
		})
	}
}

func TestIsolate(t *testing.T) {
	for _, tc := range []struct {
		test string
		pass bool
		// contains: the parent's output has these, in this order.
		contains []string
	}{
		{"TestFixturePasses", true, []string{"passed in a child process"}},
		{"TestFixtureFails", false, []string{"the test failed in its child process", "the fixture's own failure"}},
		{"TestFixturePanics", false, []string{"the test failed in its child process", "panic: the fixture's own panic"}},
		// The failed subtest's lines, and before its parent's.
		{"TestFixtureFailsAmongMany", false, []string{"--- FAIL: TestFixtureFailsAmongMany/case-100\n", "the needle among the cases", "--- FAIL: TestFixtureFailsAmongMany\n"}},
	} {
		t.Run(tc.test, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^"+tc.test+"$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), selfTestEnv+"=1")
			out, err := cmd.CombinedOutput()
			if pass := err == nil; pass != tc.pass {
				t.Errorf("the parent passed: %v (%v), want %v", pass, err, tc.pass)
			}
			rest := string(out)
			for _, want := range tc.contains {
				i := strings.Index(rest, want)
				if i < 0 {
					t.Errorf("the parent's output lacks %q (after what came before it)", want)
					continue
				}
				rest = rest[i+len(want):]
			}
			if t.Failed() {
				t.Logf("the parent's output:\n%s", out)
			}
		})
	}
}

func TestRunPattern(t *testing.T) {
	for name, want := range map[string]string{
		"TestA":                "^TestA$",
		"TestA/sub_(x)/rv=1.5": `^TestA$/^sub_\(x\)$/^rv=1\.5$`,
	} {
		if got := runPattern(name); got != want {
			t.Errorf("runPattern(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestExcerpt(t *testing.T) {
	var b strings.Builder
	b.WriteString("=== RUN   TestX\n")
	for range 1000 {
		b.WriteString("I1201 12:00:00.000000 1 server.go:1] a server log line\n")
	}
	b.WriteString("    x_test.go:10: the assertion\n")
	b.WriteString("panic: boom\n\ngoroutine 1 [running]:\nmain.f()\n\t/src/x.go:3 +0x1\n")
	got := excerpt([]byte(b.String()))
	for _, want := range []string{"=== RUN   TestX", "x_test.go:10: the assertion", "panic: boom", "\t/src/x.go:3"} {
		if !strings.Contains(got, want) {
			t.Errorf("excerpt lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "a server log line") {
		t.Errorf("excerpt keeps the server's log lines:\n%s", got)
	}
	var many strings.Builder
	for range 1000 {
		many.WriteString("    x_test.go:1: line\n")
	}
	if n := strings.Count(excerpt([]byte(many.String())), "\n"); n > excerptHead+excerptTail+1 {
		t.Errorf("excerpt of 1000 test lines has %d lines, want at most %d", n+1, excerptHead+excerptTail+1)
	}
}
