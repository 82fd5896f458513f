package watchstream

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestLinesLongLines(t *testing.T) {
	long := strings.Repeat("x", 10000)
	in := "a\n" + long + "\nb\n"
	lr := NewLines(bufio.NewReaderSize(strings.NewReader(in), 16))
	for _, want := range []string{"a\n", long + "\n", "b\n"} {
		got, err := lr.Next()
		if err != nil || string(got) != want {
			t.Fatalf("Next() = %.20q..., %v; want %.20q...", got, err, want)
		}
	}
	if _, err := lr.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("at the end: err = %v, want EOF", err)
	}
}

func TestTypeAndValue(t *testing.T) {
	line := []byte(`{"type":"ADDED","object":{"metadata":{"resourceVersion":"42","annotations":{"x.io/at":"17"},"managedFields":[{"fieldsV1":{"f:metadata":{"f:annotations":{"f:x.io/at":{}}}}}]}}}` + "\n")
	if typ, ok := Type(line); !ok || string(typ) != "ADDED" {
		t.Errorf("Type = %q, %v", typ, ok)
	}
	if v := Value(line, Key("x.io/at")); string(v) != "17" {
		t.Errorf("annotation = %q, want 17", v)
	}
	if v := Value(line, Key("resourceVersion")); string(v) != "42" {
		t.Errorf("resourceVersion = %q, want 42", v)
	}
	if v := Value(line, Key("nothing")); v != nil {
		t.Errorf("missing key = %q", v)
	}
	// Another field order still has a type, through a real decode.
	if typ, ok := Type([]byte(`{"object":{},"type":"BOOKMARK"}`)); !ok || string(typ) != "BOOKMARK" {
		t.Errorf("Type of reordered line = %q, %v", typ, ok)
	}
	if _, ok := Type([]byte("garbage")); ok {
		t.Error("garbage has a type")
	}
}
