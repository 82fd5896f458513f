package main

import (
	"bytes"
	"runtime/pprof"
	"sync"
	"testing"
)

//go:noinline
func parkedInAdmission(release <-chan struct{}, parked *sync.WaitGroup) {
	parked.Done()
	<-release
}

// goroutinesIn counts the goroutines whose stack holds the frame, each
// once, from a goroutine profile as kube-apiserver serves it.
func TestGoroutinesInCountsTheParkedOnes(t *testing.T) {
	release := make(chan struct{})
	var parked, done sync.WaitGroup
	for range 5 {
		parked.Add(1)
		done.Go(func() { parkedInAdmission(release, &parked) })
	}
	parked.Wait()
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 0); err != nil {
		t.Fatal(err)
	}
	close(release)
	done.Wait()
	in, total, err := goroutinesIn(buf.Bytes(), "github.com/watchkeeper/watchkeeper/e2e/cmd/kube-load.parkedInAdmission")
	if err != nil {
		t.Fatal(err)
	}
	if in != 5 || total < 6 {
		t.Fatalf("goroutinesIn = %d of %d, want 5 of at least 6", in, total)
	}
}
