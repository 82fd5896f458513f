package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// admissionWaitFrame is the function a request sits in while an admission
// plugin waits for its informers to sync (up to 10 s, polling every
// 100 ms): every write reaching a restarted kube-apiserver before its
// informers synced parks here.
const admissionWaitFrame = "k8s.io/apiserver/pkg/admission.(*Handler).WaitForReady"

// admissionWait is what the goroutine profiles of the restarted process
// showed: how many goroutines were in admissionWaitFrame at the peak,
// and that count summed over the samples times their spacing (request
// seconds spent waiting in admission, as the samples saw them).
type admissionWait struct {
	samples     int
	peak        int64
	peakAt      time.Duration // from the first sample
	peakOf      int64         // every goroutine, in the peak's sample
	waitSeconds float64
}

// goroutinesIn counts a goroutine profile's goroutines whose stack holds
// frame (inlined frames included), and all of them.
func goroutinesIn(data []byte, frame string) (in, total int64, err error) {
	p, err := profile.Parse(bytes.NewReader(data))
	if err != nil {
		return 0, 0, err
	}
	for _, s := range p.Sample {
		if len(s.Value) == 0 {
			continue
		}
		total += s.Value[0]
	holds:
		for _, loc := range s.Location {
			for _, line := range loc.Line {
				if line.Function != nil && strings.HasPrefix(line.Function.Name, frame) {
					in += s.Value[0]
					break holds
				}
			}
		}
	}
	return in, total, nil
}

// sampleAdmissionWait takes a goroutine profile of the restarted
// kube-apiserver every period from its first answer until ctx ends or
// window passes, counting the requests parked in admission; the peak's
// profile is saved in the profile directory.
func (l *load) sampleAdmissionWait(ctx context.Context, period, window time.Duration) {
	var w admissionWait
	var first time.Time
	var peakData []byte
	deadline := time.Now().Add(window + time.Minute) // a minute for the process to answer at all
	for time.Now().Before(deadline) && ctx.Err() == nil {
		data, err := fetchProfile(ctx, l.cluster.Server, "/debug/pprof/goroutine", 10*time.Second)
		if err == nil {
			in, total, perr := goroutinesIn(data, admissionWaitFrame)
			if perr != nil {
				l.say("goroutine profile at the restart: %v", perr)
				return
			}
			if first.IsZero() {
				first = time.Now()
				deadline = first.Add(window)
			}
			w.samples++
			w.waitSeconds += float64(in) * period.Seconds()
			if in > w.peak || w.samples == 1 {
				w.peak, w.peakAt, w.peakOf, peakData = in, time.Since(first), total, data
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(period):
		}
	}
	if w.samples == 0 {
		l.say("goroutine profiles at the restart: none answered")
		return
	}
	l.res.admissionWait = w
	path := filepath.Join(l.cfg.profileDir, l.name+"-restart-goroutines.pprof")
	if err := os.WriteFile(path, peakData, 0o644); err != nil {
		l.say("goroutine profile at the restart: %v", err)
	}
	l.say("restart: %d goroutine profiles from the first answer; requests waiting in admission for informers: peak %d of %d goroutines at %v (%s), %.1f request-seconds in all",
		w.samples, w.peak, w.peakOf, w.peakAt.Round(100*time.Millisecond), path, w.waitSeconds)
}
