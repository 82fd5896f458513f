package main

import (
	"strings"
	"testing"
	"time"
)

// Two rounds in which whichever cache ran first was faster: each round
// alone has one cache over 1.0x, the rounds pooled have neither.
func TestPooledRoundsJudgeEveryRoundsCallsAtOnce(t *testing.T) {
	wk1 := fakeResult("watchkeeper", 0.2, 10*time.Millisecond, time.Minute, 700<<20, 0)
	up1 := fakeResult("upstream", 2, 10*time.Millisecond, time.Minute, 900<<20, 0)
	wk2 := fakeResult("watchkeeper", 2, 10*time.Millisecond, time.Minute, 700<<20, 0)
	up2 := fakeResult("upstream", 0.2, 10*time.Millisecond, time.Minute, 900<<20, 0)
	var b strings.Builder
	printReport(&b, config{nodes: 10, pods: 100}, wk2, up2)
	if v := verdicts(b.String())["API call p99 <= 1.0x on every call with >= 100 samples"]; v != "MISSED" {
		t.Fatalf("round 2 alone: %q, want MISSED (the fixture does not set up the order effect)", v)
	}
	out := pooledOf([]*result{wk1, wk2}, []*result{up1, up2})
	for _, want := range []string{
		"pooled over 2 rounds",
		"pooled target met    API call p99 <= 1.0x on every call with >= 100 samples: 1 judged; over: none",
		"pooled target met    kube-apiserver peak RSS <= 0.8x: 0.78x",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the pooled report lacks %q in\n%s", want, out)
		}
	}
}

func TestPooledRoundsTakeEveryRoundsWatchEvents(t *testing.T) {
	// Each cache's events: 100 at 10ms in one round, 100 at 30ms in the
	// other on watchkeeper, 20ms in both on stock. Pooled p99 is 30ms
	// against 20ms; either round's alone would be 10 or 30.
	wk1 := fakeResult("watchkeeper", 0.2, 10*time.Millisecond, time.Minute, 700<<20, 0)
	wk2 := fakeResult("watchkeeper", 0.2, 30*time.Millisecond, time.Minute, 700<<20, 0)
	up1 := fakeResult("upstream", 0.2, 20*time.Millisecond, time.Minute, 700<<20, 0)
	up2 := fakeResult("upstream", 0.2, 20*time.Millisecond, time.Minute, 700<<20, 0)
	out := pooledOf([]*result{wk1, wk2}, []*result{up1, up2})
	if want := "pooled target MISSED watch event latency p99 <= 0.8x: 1.50x"; !strings.Contains(out, want) {
		t.Errorf("the pooled report lacks %q in\n%s", want, out)
	}
}

// pooledOf is the pooled report of the rounds' results.
func pooledOf(wks, ups []*result) string {
	var b strings.Builder
	printPooled(&b, config{nodes: 10, pods: 100}, wks, ups)
	return b.String()
}

func TestOneRoundPrintsNoPooledReport(t *testing.T) {
	r := fakeResult("watchkeeper", 0.2, 0, time.Minute, 700<<20, 0)
	if out := pooledOf([]*result{r}, []*result{r}); out != "" {
		t.Errorf("one round printed a pooled report:\n%s", out)
	}
}
