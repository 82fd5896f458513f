package storagebench

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
)

// WriterCommand is the bench binary's subcommand that serves a scenario's
// writes from its own process (ServeWrites): exactkey bills the process's CPU
// to each write, and a gRPC Put per write in that process was 15-30% of its
// window and 44% of its allocations, the same for both caches, which pulled
// every ratio toward 1. Out of the process, the figure is the cache's and
// its clients' alone.
const WriterCommand = "writer"

// The writer's line protocol: one request a line on its stdin, one answer a
// line on its stdout.
const (
	// writeRequest asks for one batch of exactkey writes:
	// "exactkey FIRST COUNT WRITES SENTINEL" (exactKeyBatch).
	writeRequest = "exactkey"
	// shardedRequest asks for the sharded scenario's creates:
	// "sharded FIRST COUNT SEED" (shardedBatch).
	shardedRequest = "sharded"
	// writeDone answers a request that wrote everything: "done SECONDS",
	// how long the writes took (exactkey: before the sentinel).
	writeDone = "done"
	// writeFailed answers a request that failed: "error MESSAGE".
	writeFailed = "error"
)

// WriterMain is the writer process (`bench writer --etcd URL --prefix P`):
// ServeWrites on stdin and stdout, until stdin ends, that is until the run
// that started it closes the pipe or exits.
func WriterMain(args []string) error {
	var env Env
	fs := flag.NewFlagSet(WriterCommand, flag.ContinueOnError)
	fs.StringVar(&env.EtcdEndpoint, "etcd", "", "etcd client URL")
	fs.StringVar(&env.Prefix, "prefix", "", "etcd key prefix of the run")
	klog.InitFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if env.EtcdEndpoint == "" || env.Prefix == "" {
		return errors.New("writer: --etcd and --prefix are required")
	}
	defer klog.Flush()
	return ServeWrites(context.Background(), env, os.Stdin, os.Stdout)
}

// ServeWrites is the writer process's loop: it answers requests from in on
// out until in ends. A request that fails is answered, not fatal; a
// malformed one ends the loop with an error.
func ServeWrites(ctx context.Context, env Env, in io.Reader, out io.Writer) error {
	pw, err := newPodWriter(env)
	if err != nil {
		return err
	}
	defer pw.close()
	return serveWrites(in, out, func(j writeJob) (time.Duration, error) {
		switch j := j.(type) {
		case exactKeyBatch:
			return exactKeyWrites(ctx, pw, j)
		case shardedBatch:
			return shardedWrites(ctx, pw, j)
		}
		return 0, fmt.Errorf("writer: no writes for %T", j)
	})
}

// writeJob is one request's writes: exactKeyBatch or shardedBatch.
type writeJob interface {
	// request is the job as a line of the protocol.
	request() string
}

// serveWrites is ServeWrites with the writing given, so the protocol can be
// tested without an etcd.
func serveWrites(in io.Reader, out io.Writer, write func(writeJob) (time.Duration, error)) error {
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		j, err := parseWriteRequest(sc.Text())
		if err != nil {
			return err
		}
		took, err := write(j)
		answer := fmt.Sprintf("%s %.6f", writeDone, took.Seconds())
		if err != nil {
			klog.ErrorS(err, "Writes failed", "request", j.request())
			answer = writeFailed + " " + strings.ReplaceAll(err.Error(), "\n", " ")
		}
		if _, err := fmt.Fprintln(out, answer); err != nil {
			return err
		}
	}
	return sc.Err()
}

// exactKeyBatch is one round of exactkey's writes: writes updates of objects
// first to first+count-1 (exactKeyTargets(count, writes) from first), then
// one of the sentinel, which no write of the batch may be.
type exactKeyBatch struct {
	first, count, writes, sentinel int
}

func (b exactKeyBatch) request() string {
	return fmt.Sprintf("%s %d %d %d %d", writeRequest, b.first, b.count, b.writes, b.sentinel)
}

// shardedBatch is the sharded scenario's writes: creates of objects first to
// first+count-1, object i named shardedName(i) with UID shardedUID(seed, i).
type shardedBatch struct {
	first, count int
	seed         uint64
}

func (b shardedBatch) request() string {
	return fmt.Sprintf("%s %d %d %d", shardedRequest, b.first, b.count, b.seed)
}

func parseWriteRequest(line string) (writeJob, error) {
	f := strings.Fields(line)
	if len(f) > 0 && f[0] == shardedRequest {
		return parseShardedRequest(line, f)
	}
	if len(f) != 5 || f[0] != writeRequest {
		return nil, fmt.Errorf("writer: request %q is not %q FIRST COUNT WRITES SENTINEL, nor %q FIRST COUNT SEED", line, writeRequest, shardedRequest)
	}
	var n [4]int
	for i := range n {
		v, err := strconv.Atoi(f[i+1])
		if err != nil {
			return nil, fmt.Errorf("writer: request %q: %w", line, err)
		}
		n[i] = v
	}
	b := exactKeyBatch{first: n[0], count: n[1], writes: n[2], sentinel: n[3]}
	if b.first < 0 || b.count <= 0 || b.writes < 0 || b.sentinel < 0 || (b.sentinel >= b.first && b.sentinel < b.first+b.count) {
		return nil, fmt.Errorf("writer: request %q: want first >= 0, count > 0, writes >= 0 and the sentinel outside the written objects", line)
	}
	return b, nil
}

func parseShardedRequest(line string, f []string) (writeJob, error) {
	if len(f) != 4 {
		return nil, fmt.Errorf("writer: request %q is not %q FIRST COUNT SEED", line, shardedRequest)
	}
	first, err1 := strconv.Atoi(f[1])
	count, err2 := strconv.Atoi(f[2])
	seed, err3 := strconv.ParseUint(f[3], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, fmt.Errorf("writer: request %q: %w", line, err)
	}
	if first < 0 || count <= 0 {
		return nil, fmt.Errorf("writer: request %q: want first >= 0 and count > 0", line)
	}
	return shardedBatch{first: first, count: count, seed: seed}, nil
}

// exactKeyWrites makes b's writes from fanOutWriters concurrent writers, and
// then the sentinel's, and returns how long the writes took without the
// sentinel.
func exactKeyWrites(ctx context.Context, pw *podWriter, b exactKeyBatch) (time.Duration, error) {
	targets := exactKeyTargets(b.count, b.writes)
	start := time.Now()
	var k atomic.Int64
	err := runWriters(fanOutWriters, func() error {
		for {
			n := int(k.Add(1)) - 1
			if n >= len(targets) {
				return nil
			}
			if _, err := pw.put(ctx, benchPod(exactKeyName(b.first+targets[n]), time.Time{})); err != nil {
				return err
			}
		}
	})
	took := time.Since(start)
	if err != nil {
		return took, err
	}
	_, err = pw.put(ctx, benchPod(exactKeyName(b.sentinel), time.Time{}))
	return took, err
}

// shardedWrites creates b's objects from fanOutWriters concurrent writers,
// each stamped with its write time (podWriter.put), and returns how long
// they took.
func shardedWrites(ctx context.Context, pw *podWriter, b shardedBatch) (time.Duration, error) {
	start := time.Now()
	var k atomic.Int64
	err := runWriters(fanOutWriters, func() error {
		for {
			n := int(k.Add(1)) - 1
			if n >= b.count {
				return nil
			}
			if _, err := pw.put(ctx, shardedPod(b.seed, b.first+n)); err != nil {
				return err
			}
		}
	})
	return time.Since(start), err
}

// writerProcess is the writer as the measured process holds it: a child it
// owns, ended when the scenario ends.
type writerProcess struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	answers *bufio.Scanner
}

// startWriter starts `self writer` on env's etcd and prefix; its logs go to
// this process's stderr.
func startWriter(env Env) (*writerProcess, error) {
	if env.Self == "" {
		return nil, errors.New("no bench binary to start the writer from (Env.Self)")
	}
	cmd := exec.Command(env.Self, WriterCommand, "--etcd", env.EtcdEndpoint, "--prefix", env.Prefix)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the writer: %w", err)
	}
	return &writerProcess{cmd: cmd, stdin: stdin, answers: bufio.NewScanner(stdout)}, nil
}

// exactKey has the writer make batch b and returns how long the writes
// took. It waits for the answer however long the writes take: the writer's
// own etcd client fails them if etcd is gone, and the run's hard timeout ends
// a hung one.
func (w *writerProcess) exactKey(b exactKeyBatch) (time.Duration, error) { return w.do(b) }

// do has the writer make job j and returns how long its writes took, as
// exactKey.
func (w *writerProcess) do(j writeJob) (time.Duration, error) {
	if _, err := fmt.Fprintln(w.stdin, j.request()); err != nil {
		return 0, fmt.Errorf("asking the writer: %w", err)
	}
	if !w.answers.Scan() {
		return 0, fmt.Errorf("the writer ended without an answer: %v", w.answers.Err())
	}
	return parseWriteAnswer(w.answers.Text())
}

func parseWriteAnswer(line string) (time.Duration, error) {
	word, rest, _ := strings.Cut(line, " ")
	switch word {
	case writeDone:
		s, err := strconv.ParseFloat(rest, 64)
		if err != nil {
			return 0, fmt.Errorf("writer answered %q: %w", line, err)
		}
		return time.Duration(s * float64(time.Second)), nil
	case writeFailed:
		return 0, fmt.Errorf("writer: %s", rest)
	}
	return 0, fmt.Errorf("writer answered %q", line)
}

// stop closes the writer's stdin, which ends it, and waits for it.
func (w *writerProcess) stop() {
	_ = w.stdin.Close()
	if err := w.cmd.Wait(); err != nil {
		klog.ErrorS(err, "Writer process ended badly")
	}
}
