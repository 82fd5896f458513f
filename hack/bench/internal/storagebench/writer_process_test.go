package storagebench

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// The writer answers each request on its own line, a failed write with its
// error (and goes on), and stops at a request it cannot read; the measured
// process reads the answers back.
func TestWriterProtocol(t *testing.T) {
	var asked []string
	write := func(objects, writes int) (time.Duration, error) {
		asked = append(asked, strings.Repeat("w", writes))
		if writes == 2 {
			return 0, errors.New("etcd said no\nat all")
		}
		return 1500 * time.Millisecond, nil
	}
	var out bytes.Buffer
	err := serveWrites(strings.NewReader("exactkey 10 1\nexactkey 10 2\nexactkey 10 3\n"), &out, write)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(asked, ","); got != "w,ww,www" {
		t.Errorf("writes asked %q, want w,ww,www", got)
	}
	answers := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(answers) != 3 {
		t.Fatalf("answers %q, want 3 lines", out.String())
	}
	if took, err := parseWriteAnswer(answers[0]); err != nil || took != 1500*time.Millisecond {
		t.Errorf("first answer %q read as %v, %v; want 1.5s", answers[0], took, err)
	}
	if _, err := parseWriteAnswer(answers[1]); err == nil || !strings.Contains(err.Error(), "etcd said no at all") {
		t.Errorf("second answer %q read as error %v, want the write's error on one line", answers[1], err)
	}
	for _, bad := range []string{"exactkey 10", "exactkey ten 1", "exactkey 0 1", "exactkey 10 -1", "fanout 10 1"} {
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
