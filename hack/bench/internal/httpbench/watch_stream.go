package httpbench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
)

// writtenAtAnnotation carries a write's wall time (UnixNano) on the widget
// itself, so every watcher can time write -> receipt without a side channel.
const writtenAtAnnotation = "bench.watchkeeper.io/written-at"

type eventKind int

const (
	eventOther  eventKind = iota
	eventObject           // ADDED, MODIFIED, DELETED
	eventBookmark
	eventError
)

// The apiserver's JSON watch stream is one compact WatchEvent per line,
// {"type":"...","object":{...}}: json.Encoder ends each with a newline and
// strings inside escape theirs. The consumer looks for the type and the
// timestamp with byte searches instead of decoding the event: with 10k
// watchers the client decodes 10k copies of every event on the same two
// cores as the server, and a full decode would make the client the
// bottleneck of the figures we want of the server.
var (
	typePrefix    = []byte(`{"type":"`)
	writtenAtKey  = []byte(`"` + writtenAtAnnotation + `":"`)
	typeAdded     = []byte("ADDED")
	typeModified  = []byte("MODIFIED")
	typeDeleted   = []byte("DELETED")
	typeBookmark  = []byte("BOOKMARK")
	typeErrorWord = []byte("ERROR")
)

// classify returns the kind of one watch event line and, for objects
// carrying the annotation, the write time it holds (0 otherwise).
func classify(line []byte) (eventKind, int64) {
	t, ok := eventType(line)
	if !ok {
		return eventOther, 0
	}
	switch {
	case bytes.Equal(t, typeBookmark):
		return eventBookmark, 0
	case bytes.Equal(t, typeErrorWord):
		return eventError, 0
	case bytes.Equal(t, typeAdded), bytes.Equal(t, typeModified), bytes.Equal(t, typeDeleted):
		return eventObject, writtenAt(line)
	}
	return eventOther, 0
}

func eventType(line []byte) ([]byte, bool) {
	if rest, ok := bytes.CutPrefix(line, typePrefix); ok {
		if end := bytes.IndexByte(rest, '"'); end > 0 {
			return rest[:end], true
		}
	}
	// Not the layout the apiserver writes today: decode it properly rather
	// than miscount.
	var ev struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(line, &ev); err != nil || ev.Type == "" {
		return nil, false
	}
	return []byte(ev.Type), true
}

// writtenAt finds the annotation's value. The key is quoted whole, so the
// managedFields entry "f:bench.watchkeeper.io/written-at" does not match.
func writtenAt(line []byte) int64 {
	i := bytes.Index(line, writtenAtKey)
	if i < 0 {
		return 0
	}
	rest := line[i+len(writtenAtKey):]
	end := bytes.IndexByte(rest, '"')
	if end <= 0 {
		return 0
	}
	v, err := strconv.ParseInt(string(rest[:end]), 10, 64)
	if err != nil {
		return 0
	}
	return v
}

// errorMessage is the message of an ERROR event's Status, for reports.
func errorMessage(line []byte) string {
	var ev struct {
		Object struct {
			Message string `json:"message"`
			Code    int    `json:"code"`
		} `json:"object"`
	}
	if err := json.Unmarshal(line, &ev); err != nil {
		return string(line)
	}
	return strconv.Itoa(ev.Object.Code) + " " + ev.Object.Message
}

// lineReader returns whole lines from a stream without allocating per line:
// the slice is valid until the next call.
type lineReader struct {
	r   *bufio.Reader
	buf []byte // holds a line longer than r's buffer
}

func newLineReader(r *bufio.Reader) *lineReader { return &lineReader{r: r} }

func (l *lineReader) next() ([]byte, error) {
	line, err := l.r.ReadSlice('\n')
	if err == nil {
		return line, nil
	}
	if !errors.Is(err, bufio.ErrBufferFull) {
		return nil, err
	}
	l.buf = append(l.buf[:0], line...)
	for {
		line, err = l.r.ReadSlice('\n')
		l.buf = append(l.buf, line...)
		if err == nil {
			return l.buf, nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
	}
}
