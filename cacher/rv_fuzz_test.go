package cacher

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/storage"
)

// FuzzParseRV feeds arbitrary strings to parseRV, which reads a malformed
// resourceVersion of a watch or get past 64 bytes (parseRequestRV; shorter
// ones get the storage's own error). It must never panic; what
// storage.APIObjectVersioner refuses is a 400 Bad Request (never a 500) that
// quotes the bad value, or, past 64 bytes, only its first 64 bytes and
// "...", so a client's megabyte of garbage reaches neither the response nor
// the logs; what it accepts is a decimal uint64 (or "" for none) that
// parseRV returns unchanged and that round-trips through strconv.FormatUint.
func FuzzParseRV(f *testing.F) {
	for _, rv := range []string{
		"", "0", "1", "00", "007", "42",
		"18446744073709551615", // max uint64
		"18446744073709551616", // max uint64 + 1
		"99999999999999999999999999999999",
		"-1", "+1", "-0", "+0", " 1", "1 ", "1\n", "\x00",
		"1e3", "0x10", "0b1", "0o7", "1_000", "1.0", "1,000",
		"abc", "null", "\"5\"", "１２", "٣", // fullwidth and Arabic-Indic digits
		"\xff\xfe", "9223372036854775807", "9223372036854775808",
		strings.Repeat("x", 64), strings.Repeat("x", 65), strings.Repeat("9", 4096), // at, just past and far past the quoting bound
		strings.Repeat("9", 63) + "é",                            // a rune cut in two by the bound
		strings.Repeat("1", 64) + "\"" + strings.Repeat("2", 10), // a quote just past the bound
		strings.Repeat("x", 64) + "...",                          // cut, it reads as it was
	} {
		f.Add(rv)
	}
	versioner := storage.APIObjectVersioner{}

	f.Fuzz(func(t *testing.T, rv string) {
		want, refused := versioner.ParseResourceVersion(rv)
		got, err := parseRV(versioner, rv)

		// An independent reading: no resourceVersion, or a decimal uint64.
		_, uintErr := strconv.ParseUint(rv, 10, 64)
		if valid := rv == "" || uintErr == nil; valid != (refused == nil) {
			t.Fatalf("APIObjectVersioner on %q: %v; strconv.ParseUint: %v", rv, refused, uintErr)
		}

		if refused != nil {
			if err == nil {
				t.Fatalf("parseRV(%q) = %d, nil; the versioner refuses it: %v", rv, got, refused)
			}
			if !apierrors.IsBadRequest(err) {
				t.Fatalf("parseRV(%q) error %v (%T, reason %q), want a 400 Bad Request", rv, err, err, apierrors.ReasonForError(err))
			}
			if code := apiStatusCode(err); code != http.StatusBadRequest {
				t.Fatalf("parseRV(%q): status code %d, want %d", rv, code, http.StatusBadRequest)
			}
			if got != 0 {
				t.Fatalf("parseRV(%q) = %d with an error, want 0", rv, got)
			}
			// The value is quoted, cut to its first 64 bytes and "..." when
			// longer: never whole past 64 bytes, never cut before.
			shown := rv
			if len(rv) > 64 {
				shown = rv[:64] + "..."
			}
			msg := err.Error()
			if !strings.Contains(msg, strconv.Quote(shown)) {
				t.Fatalf("parseRV(%.80q...) error %.200q does not quote %s", rv, msg, strconv.Quote(shown))
			}
			if shown != rv && strings.Contains(msg, strconv.Quote(rv)) {
				t.Fatalf("parseRV(%.80q...) error quotes all %d bytes", rv, len(rv))
			}
			if limit := len(strconv.Quote(shown)) + 100; len(msg) > limit {
				t.Fatalf("parseRV(%.80q...) error is %d bytes, want at most %d", rv, len(msg), limit)
			}
			return
		}

		if err != nil {
			t.Fatalf("parseRV(%q): %v; the versioner accepts it as %d", rv, err, want)
		}
		if got != want {
			t.Fatalf("parseRV(%q) = %d, the versioner reads %d", rv, got, want)
		}
		canonical := strconv.FormatUint(got, 10)
		again, err := parseRV(versioner, canonical)
		if err != nil || again != got {
			t.Fatalf("parseRV(%q) = %d, but parseRV(%q) = %d, %v", rv, got, canonical, again, err)
		}
		if rv != "" && canonical != rv {
			// Only leading zeros may differ: "007" is 7.
			if n, err := strconv.ParseUint(rv, 10, 64); err != nil || n != got || rv[0] != '0' {
				t.Fatalf("parseRV(%q) = %d, which formats as %q", rv, got, canonical)
			}
		}
	})
}

func apiStatusCode(err error) int32 {
	var s apierrors.APIStatus
	if errors.As(err, &s) {
		return s.Status().Code
	}
	return 0
}
