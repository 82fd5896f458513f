package restartprobe

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"
)

// Check is one readiness check (or one Detail name) that failed after the
// new process first answered, before it was ready.
type Check struct {
	Name string
	// FirstFailed is the first answer that marked it failed, after Since.
	FirstFailed time.Duration
	// Failed is how long it failed: for each answer that marked it
	// failed, the time to the next answer (polls without an answer are
	// passed over), summed. A check that fails, passes and fails again
	// counts only its failing spans.
	Failed time.Duration
	// Passed is the first answer after its last failing one, after Since;
	// for a check still failing at the last answer (no 200 seen), the
	// last answer, with StillFailing set.
	Passed       time.Duration
	StillFailing bool
}

// Timeline is a restart as the polls saw it, relative to Since (the old
// process's exit).
type Timeline struct {
	Since time.Time
	// FirstAnswer and Ready are the first answer of any status and the
	// first 200 at or after Since; Answered and IsReady say whether there
	// was one.
	FirstAnswer, Ready time.Duration
	Answered, IsReady  bool
	// Slowest is the longest answer (or failed request) from Since until
	// ready.
	Slowest time.Duration
	// Checks is every check that failed from the first answer until
	// ready, the last to pass first (then the longest failing, then by
	// name); Details the same for the answers' Detail names.
	Checks, Details []Check
}

// Analyze turns polls (in the order they were sent) into the timeline of
// the process that started after since: the polls before since (the old
// process, shutting down) and after the first 200 do not count.
func Analyze(polls []Poll, since time.Time) Timeline {
	tl := Timeline{Since: since}
	rel := func(t time.Time) time.Duration { return t.Sub(since) }
	checks, details := newSpans(), newSpans()
	for _, p := range polls {
		if p.At.Before(since) {
			continue
		}
		tl.Slowest = max(tl.Slowest, p.Took)
		if p.Status == 0 {
			continue // no answer: says nothing of the checks
		}
		at := rel(p.At)
		if !tl.Answered {
			tl.Answered, tl.FirstAnswer = true, at
		}
		if p.Status == http.StatusOK {
			tl.IsReady, tl.Ready = true, at
			checks.answer(at, nil)
			details.answer(at, nil)
			break
		}
		checks.answer(at, p.Failed)
		details.answer(at, p.Detail)
	}
	tl.Checks, tl.Details = checks.result(), details.result()
	return tl
}

// spans follows names through successive answers.
type spans struct {
	m       map[string]*Check
	failing map[string]bool // at the previous answer
	prev    time.Duration
}

func newSpans() *spans { return &spans{m: map[string]*Check{}, failing: map[string]bool{}} }

// answer records an answer at `at` that marked names failed.
func (s *spans) answer(at time.Duration, names []string) {
	for n := range s.failing {
		s.m[n].Failed += at - s.prev
		s.m[n].Passed = at // passed here unless it fails again
	}
	now := map[string]bool{}
	for _, n := range names {
		now[n] = true
		c := s.m[n]
		if c == nil {
			c = &Check{Name: n, FirstFailed: at}
			s.m[n] = c
		}
		c.Passed, c.StillFailing = at, true
	}
	for n := range s.failing {
		if !now[n] {
			s.m[n].StillFailing = false
		}
	}
	s.failing, s.prev = now, at
}

func (s *spans) result() []Check {
	out := make([]Check, 0, len(s.m))
	for _, c := range s.m {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.StillFailing != b.StillFailing {
			return a.StillFailing
		}
		if a.Passed != b.Passed {
			return a.Passed > b.Passed
		}
		if a.Failed != b.Failed {
			return a.Failed > b.Failed
		}
		return a.Name < b.Name
	})
	return out
}

// LastToPass is the checks that passed last, together (on the same
// answer); none when no check failed.
func (tl Timeline) LastToPass() []Check {
	if len(tl.Checks) == 0 {
		return nil
	}
	first := tl.Checks[0]
	n := 1
	for n < len(tl.Checks) && tl.Checks[n].Passed == first.Passed && tl.Checks[n].StillFailing == first.StillFailing {
		n++
	}
	return tl.Checks[:n]
}

// Summary is one line: when the new process answered and was ready, and
// the last checks to pass with how long each failed.
func (tl Timeline) Summary() string {
	var b strings.Builder
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }
	switch {
	case !tl.Answered:
		b.WriteString("/readyz: no answer after the exit")
	case !tl.IsReady:
		fmt.Fprintf(&b, "/readyz: first answer %v after the exit, not ready while polled", r(tl.FirstAnswer))
	default:
		fmt.Fprintf(&b, "/readyz: first answer %v after the exit, ready %v after", r(tl.FirstAnswer), r(tl.Ready))
	}
	last := tl.LastToPass()
	if len(last) == 0 {
		if tl.Answered {
			b.WriteString("; no check failed after the first answer")
		}
		return b.String()
	}
	b.WriteString("; last checks to pass: ")
	if last[0].StillFailing {
		b.WriteString("(still failing) ")
	}
	for i, c := range last {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s (%v)", c.Name, r(c.Failed))
	}
	return b.String()
}
