package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
)

// childKillMargin is how long past a child's hard timeout the parent waits
// before killing it.
const childKillMargin = 30 * time.Second

// runChild runs one spec in a fresh `bench run` process and returns the
// results it printed. A failed run may still have printed some; the error
// carries the end of its log.
func runChild(ctx context.Context, self string, c childFlags, logDir string) ([]result.Result, error) {
	logPath := filepath.Join(logDir, runFileName(c.spec)+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	ctx, cancel := context.WithTimeout(ctx, c.spec.Timeout+hardTimeoutMargin+childKillMargin)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, c.args()...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGKILL) }
	cmd.Stderr = logFile
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	defer stdin.Close()
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	runErr := cmd.Run()

	var results []result.Result
	var stray []string
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var r result.Result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil || r.Metric == "" {
			stray = append(stray, sc.Text())
			continue
		}
		results = append(results, r)
	}
	if runErr != nil {
		return results, fmt.Errorf("%w: %s (log %s)", runErr, lastLines(logPath, 2), logPath)
	}
	if len(stray) > 0 {
		// Something in the child wrote to stdout; its figures may still be
		// fine, but the run should be looked at.
		return results, fmt.Errorf("%d stray stdout lines, first %q", len(stray), stray[0])
	}
	return results, nil
}

// runFileName is r's name as a file name: its log's, its profiles'.
func runFileName(r runSpec) string { return strings.NewReplacer("/", "_").Replace(r.String()) }

// lastLines is the end of a log, for an error message.
func lastLines(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}
