package storagebench

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// The writer answers each request on its own line, a failed write with its
// error (and goes on), and stops at a request it cannot read; the measured
// process reads the answers back.
func TestWriterProtocol(t *testing.T) {
	var asked []writeJob
	write := func(j writeJob) (time.Duration, error) {
		asked = append(asked, j)
		if b, ok := j.(exactKeyBatch); ok && b.writes == 2 {
			return 0, errors.New("etcd said no\nat all")
		}
		return 1500 * time.Millisecond, nil
	}
	batches := []writeJob{
		exactKeyBatch{first: 0, count: 10, writes: 1, sentinel: 10},
		exactKeyBatch{first: 11, count: 5, writes: 2, sentinel: 10},
		exactKeyBatch{first: 0, count: 10, writes: 3, sentinel: 10},
		shardedBatch{first: 0, count: 500, seed: 1<<63 + 5},
	}
	var in strings.Builder
	for _, b := range batches {
		in.WriteString(b.request() + "\n")
	}
	var out bytes.Buffer
	if err := serveWrites(strings.NewReader(in.String()), &out, write); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(asked, batches) {
		t.Errorf("batches asked %+v, want %+v", asked, batches)
	}
	answers := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(answers) != 4 {
		t.Fatalf("answers %q, want 4 lines", out.String())
	}
	if took, err := parseWriteAnswer(answers[0]); err != nil || took != 1500*time.Millisecond {
		t.Errorf("first answer %q read as %v, %v; want 1.5s", answers[0], took, err)
	}
	if _, err := parseWriteAnswer(answers[1]); err == nil || !strings.Contains(err.Error(), "etcd said no at all") {
		t.Errorf("second answer %q read as error %v, want the write's error on one line", answers[1], err)
	}
	for _, bad := range []string{
		"exactkey 0 10 1", "exactkey 0 ten 1 10", "exactkey 0 0 1 10", "exactkey 0 10 -1 10", "exactkey -1 10 1 10",
		"exactkey 0 10 1 -1", "fanout 0 10 1 10",
		// The sentinel among the objects written.
		"exactkey 0 10 1 9", "exactkey 11 5 1 11",
		"sharded 0 10", "sharded 0 10 1 2", "sharded -1 10 1", "sharded 0 0 1", "sharded 0 10 -1", "sharded 0 x 1",
	} {
		asked = nil
		if err := serveWrites(strings.NewReader(bad+"\n"), &out, write); err == nil || len(asked) != 0 {
			t.Errorf("request %q: error %v after %d writes, want an error and none", bad, err, len(asked))
		}
	}
	for _, bad := range []string{"", "done", "done x", "ok 1"} {
		if _, err := parseWriteAnswer(bad); err == nil {
			t.Errorf("answer %q read without an error", bad)
		}
	}
}
