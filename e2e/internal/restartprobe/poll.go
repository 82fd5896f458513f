// Package restartprobe watches a kube-apiserver restart from the outside:
// it polls /readyz?verbose while the server goes down and comes back,
// records each answer and which checks it marked failed, turns the answers
// into a timeline (when the new process first answered, when it was ready,
// and for each check that failed in between how long it failed and when it
// passed), and reads the CPU time a process has used. readyz-restart and
// kube-load share it.
package restartprobe

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Poll is one answer of /readyz?verbose, or the lack of one.
type Poll struct {
	At     time.Time     // when the request was sent
	Took   time.Duration // until the answer, or the error
	Status int           // 0: no answer (Err says why)
	Err    string
	// Failed is the checks the answer marked [-], in its order.
	Failed []string
	// Detail is what Config.Detail added to this answer (for example the
	// caches not ready), nil without it.
	Detail []string
}

// Config says what to poll and how.
type Config struct {
	// Client sends the requests; its Timeout bounds each one (a poll
	// that times out is a poll without an answer).
	Client *http.Client
	// URL is the server's base URL, without the path.
	URL string
	// Interval is the pause between the end of one poll and the next.
	Interval time.Duration
	// MaxPolls bounds the answers kept; polling stops when it is reached
	// (Poller.Truncated). 0: 6000, ten minutes at 100ms.
	MaxPolls int
	// Clock reads the time of each poll; nil: the real clock. The pause
	// between polls is real time either way.
	Clock clock.PassiveClock
	// Detail, when set, is called after each answer with the failed
	// checks; what it returns is kept as the answer's Detail.
	Detail func(ctx context.Context, failed []string) []string
	// Observe, when set, sees each poll as it is recorded, on the
	// polling goroutine (it must not block).
	Observe func(Poll)
}

// Poller polls until Stop; it owns one goroutine.
type Poller struct {
	cfg       Config
	stop      context.CancelFunc
	done      chan struct{}
	mu        sync.Mutex
	polls     []Poll
	truncated bool
}

// Start starts polling cfg.URL+"/readyz?verbose" at once and every
// cfg.Interval after, until Stop or ctx ends.
func Start(ctx context.Context, cfg Config) *Poller {
	if cfg.MaxPolls <= 0 {
		cfg.MaxPolls = 6000
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	ctx, stop := context.WithCancel(ctx)
	p := &Poller{cfg: cfg, stop: stop, done: make(chan struct{})}
	go p.run(ctx)
	return p
}

func (p *Poller) run(ctx context.Context) {
	defer close(p.done)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		poll := p.once(ctx)
		if ctx.Err() != nil {
			return // a poll cut short by Stop is no answer of the server's
		}
		p.mu.Lock()
		p.polls = append(p.polls, poll)
		full := len(p.polls) >= p.cfg.MaxPolls
		p.truncated = full
		p.mu.Unlock()
		if p.cfg.Observe != nil {
			p.cfg.Observe(poll)
		}
		if full {
			return
		}
		t.Reset(p.cfg.Interval)
	}
}

func (p *Poller) once(ctx context.Context) Poll {
	clk := p.cfg.Clock
	poll := Poll{At: clk.Now()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.cfg.URL+"/readyz?verbose", nil)
	if err != nil {
		poll.Err = err.Error()
		return poll
	}
	resp, err := p.cfg.Client.Do(req)
	if err != nil {
		poll.Took = clk.Since(poll.At)
		poll.Err = err.Error()
		return poll
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	poll.Took = clk.Since(poll.At)
	if err != nil {
		poll.Err = err.Error()
		return poll
	}
	poll.Status = resp.StatusCode
	poll.Failed = FailedChecks(string(body))
	if p.cfg.Detail != nil {
		poll.Detail = p.cfg.Detail(ctx, poll.Failed)
	}
	return poll
}

// FailedChecks is the names of the checks a /readyz?verbose body marks
// failed ("[-]informer-sync failed: reason withheld").
func FailedChecks(body string) []string {
	var out []string
	for _, line := range strings.Split(body, "\n") {
		if name, ok := strings.CutPrefix(line, "[-]"); ok {
			name, _, _ = strings.Cut(name, " ")
			out = append(out, name)
		}
	}
	return out
}

// Stop stops polling, waits for the goroutine, and returns every poll
// recorded, in order.
func (p *Poller) Stop() []Poll {
	p.stop()
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.polls
}

// Truncated says whether polling stopped at MaxPolls.
func (p *Poller) Truncated() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.truncated
}

// ProcessCPU is the user+system CPU time process pid has used so far, from
// /proc/PID/stat.
func ProcessCPU(pid int) (time.Duration, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(string(stat))
}

// clockTicks is the unit of /proc/PID/stat's times (USER_HZ, 100 on Linux).
const clockTicks = 100

func parseStatCPU(stat string) (time.Duration, error) {
	// The command may hold spaces and parens: fields start after its
	// last closing paren.
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/PID/stat: no command in %q", stat)
	}
	f := strings.Fields(stat[i+1:])
	// utime and stime are fields 14 and 15 of the line, 12 and 13 here.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/PID/stat: %d fields after the command", len(f))
	}
	ut, err := strconv.ParseInt(f[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/PID/stat utime: %w", err)
	}
	st, err := strconv.ParseInt(f[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/PID/stat stime: %w", err)
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}
