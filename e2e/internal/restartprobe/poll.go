// Package restartprobe watches a kube-apiserver restart from the outside:
// it polls /readyz?verbose while the server goes down and comes back,
// records each answer and which checks it marked failed, turns the answers
// into a timeline (when the new process first answered, when it was ready,
// and for each check that failed in between how long it failed and when it
// passed). readyz-restart and kube-load share it; both read the new
// process's CPU with internal/childserver.ProcCPUSeconds.
package restartprobe

import (
	"context"
	"io"
	"net/http"
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
	// (a timeline of them then ends not ready). 0: 6000, ten minutes at
	// 100ms.
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
	cfg   Config
	stop  context.CancelFunc
	done  chan struct{}
	mu    sync.Mutex
	polls []Poll
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
