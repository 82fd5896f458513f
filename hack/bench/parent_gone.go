package main

import (
	"io"
	"os"
)

// exitWhenParentGone ends a child process when its stdin, a pipe the parent
// holds open, reaches EOF: the parent exited or was killed, and a child left
// behind (an etcd, 100k watches) would skew everyone's next run.
func exitWhenParentGone() {
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(4)
	}()
}
