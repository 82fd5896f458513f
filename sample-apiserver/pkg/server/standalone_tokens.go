package server

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/token/tokenfile"
)

// loadTokenFile reads --token-auth-file, kube-apiserver's static token
// format: one `token,user,uid,"group1,group2"` a line, groups optional.
// Upstream's tokenfile authenticates; the checks before it turn what
// upstream would take silently (an empty user, groups not quoted so all but
// the first are lost, a token repeated so the last line wins) into errors
// naming the line. No error quotes a token: they end up in logs.
func loadTokenFile(path string) (authenticator.Token, []error) {
	wrap := func(err error) error { return fmt.Errorf("--token-auth-file=%s: %w", path, err) }
	f, err := os.Open(path)
	if err != nil {
		return nil, []error{wrap(err)}
	}
	errs := checkTokenCSV(f)
	f.Close()
	for i := range errs {
		errs[i] = wrap(errs[i])
	}
	if len(errs) > 0 {
		return nil, errs
	}
	auth, err := tokenfile.NewCSV(path)
	if err != nil {
		return nil, []error{wrap(err)}
	}
	return auth, nil
}

func checkTokenCSV(r io.Reader) []error {
	// The reader as tokenfile.NewCSV configures it, so both see the same
	// records.
	reader := csv.NewReader(r)
	reader.FieldsPerRecord = -1
	var errs []error
	firstLine := map[string]int{} // token -> the line it is on
	for {
		record, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			// A csv.ParseError names the line and column, not the content;
			// the rest of the file cannot be read reliably.
			return append(errs, err)
		}
		line, _ := reader.FieldPos(0)
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("line %d: "+format, append([]any{line}, args...)...))
		}
		switch {
		case len(record) < 3:
			bad(`%d fields, want token,user,uid or token,user,uid,"group1,group2"`, len(record))
			continue
		case len(record) > 4:
			bad(`%d fields, want at most 4: quote the groups as one field, "group1,group2"`, len(record))
		}
		token, name := record[0], record[1]
		switch {
		case token == "":
			bad("the token is empty")
		case strings.IndexFunc(token, unicode.IsSpace) >= 0:
			// A bearer token cannot carry a space: it would never match.
			bad("the token contains white space")
		default:
			if first, seen := firstLine[token]; seen {
				bad("the same token as line %d", first)
			} else {
				firstLine[token] = line
			}
		}
		if name == "" {
			bad("the user name is empty")
		}
		if len(record) >= 4 {
			for _, g := range strings.Split(record[3], ",") {
				if g == "" {
					bad("an empty group name in %q", record[3])
					break
				}
			}
		}
	}
	if len(errs) == 0 && len(firstLine) == 0 {
		errs = append(errs, errors.New("no tokens"))
	}
	return errs
}
