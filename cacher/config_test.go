package cacher

import (
	"strings"
	"testing"
	"time"

	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/apis/example"

	"github.com/watchkeeper/watchkeeper/cacher/internal/cachertest"
)

// Zero is never a default in Config: every schedule knob that cannot be
// off must be set, and New names each one that is not. A knob whose zero is
// off (the options allow it) is accepted at zero, and named when negative.
func TestNewNamesEveryMissingScheduleKnob(t *testing.T) {
	cfg := resourceOnly()
	cfg.BookmarkJitter = -1
	_, err := New(cfg)
	if err == nil {
		t.Fatal("New with no schedule succeeded")
	}
	for _, want := range []string{"BookmarkFrequency > 0", "BookmarkGranularity > 0", "EventsHistoryWindow > 0",
		"HistoryCapacity > 0", "WatcherBuffer > 0", "BookmarkJitter >= 0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	for _, off := range []string{"BookmarkPreDeadlineOffset", "BookmarkMaxStaleness", "StorageSilenceTimeout"} {
		if strings.Contains(err.Error(), off) {
			t.Errorf("error %q names %s, whose zero is off", err, off)
		}
	}

	cfg = resourceOnly()
	cfg.BookmarkFrequency, cfg.BookmarkGranularity = time.Minute, time.Second
	cfg.EventsHistoryWindow, cfg.HistoryCapacity, cfg.WatcherBuffer = 75*time.Second, 1000, DefaultWatcherBuffer
	cfg.BookmarkPreDeadlineOffset, cfg.BookmarkMaxStaleness, cfg.StorageSilenceTimeout = -1, -1, -1
	_, err = New(cfg)
	if err == nil {
		t.Fatal("New with negative BookmarkPreDeadlineOffset, BookmarkMaxStaleness and StorageSilenceTimeout succeeded")
	}
	for _, want := range []string{"BookmarkPreDeadlineOffset >= 0", "BookmarkMaxStaleness >= 0", "StorageSilenceTimeout >= 0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

// resourceOnly is a Config with the resource's storage and functions and
// no schedule at all.
func resourceOnly() Config {
	return Config{
		Storage:        cachertest.NewFakeStorage(100),
		ResourcePrefix: "/pods/",
		KeyFunc:        cachertest.PodKey,
		NewFunc:        func() kruntime.Object { return &example.Pod{} },
		NewListFunc:    func() kruntime.Object { return &example.PodList{} },
		GetAttrsFunc:   cachertest.PodAttrs,
	}
}
