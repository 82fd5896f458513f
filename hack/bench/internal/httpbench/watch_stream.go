package httpbench

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/watchkeeper/watchkeeper/internal/watchstream"
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

// The consumer looks for the type and the timestamp with byte searches
// (package watchstream) instead of decoding the event: with 10k watchers
// the client decodes 10k copies of every event on the same two cores as the
// server, and a full decode would make the client the bottleneck of the
// figures we want of the server.
var (
	writtenAtKey  = watchstream.Key(writtenAtAnnotation)
	typeAdded     = []byte("ADDED")
	typeModified  = []byte("MODIFIED")
	typeDeleted   = []byte("DELETED")
	typeBookmark  = []byte("BOOKMARK")
	typeErrorWord = []byte("ERROR")
)

// classify returns the kind of one watch event line and, for objects
// carrying the annotation, the write time it holds (0 otherwise).
func classify(line []byte) (eventKind, int64) {
	t, ok := watchstream.Type(line)
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

// writtenAt finds the annotation's value, 0 when absent.
func writtenAt(line []byte) int64 {
	v, err := strconv.ParseInt(string(watchstream.Value(line, writtenAtKey)), 10, 64)
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
