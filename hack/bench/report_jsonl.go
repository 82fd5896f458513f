package main

import (
	"bufio"
	"encoding/json"
	"os"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
)

// writeJSONL writes one result per line, the format the children print.
func writeJSONL(path string, results []result.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, r := range results {
		if err := enc.Encode(r); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
