package options_test

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/watchkeeper/watchkeeper/options"
)

// The defaults are upstream's schedule: bookmarks every minute, the last one
// 2s before a watch's deadline, history for the frequency plus 15s.
func ExampleNewWatchCacheOptions() {
	o := options.NewWatchCacheOptions()
	fmt.Println(o.BookmarkFrequency, o.BookmarkPreDeadlineOffset, o.EventsHistoryWindow)
	// Output: 1m0s 2s 0s
}

// A server adds the flags to its own flag set and validates them together
// with its other options.
func ExampleWatchCacheOptions_AddFlags() {
	o := options.NewWatchCacheOptions()
	fs := pflag.NewFlagSet("server", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--watch-cache-bookmark-frequency=5s", "--watch-cache-bookmark-pre-deadline-offset=1s"}); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(o.BookmarkFrequency, o.BookmarkPreDeadlineOffset, len(o.Validate()))
	// Output: 5s 1s 0
}

// Validate names every option that is out of range, not only the first.
func ExampleWatchCacheOptions_Validate() {
	o := options.NewWatchCacheOptions()
	o.BookmarkFrequency = 0
	o.BookmarkPreDeadlineOffset = -time.Second
	fmt.Println(len(o.Validate()) >= 2)
	// Output: true
}
