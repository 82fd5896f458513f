package httpbench

import "testing"

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		line string
		kind eventKind
		at   int64
	}{
		{`{"type":"ADDED","object":{"metadata":{"annotations":{"bench.watchkeeper.io/written-at":"1700000000000000001"},"managedFields":[{"fieldsV1":{"f:metadata":{"f:annotations":{"f:bench.watchkeeper.io/written-at":{}}}}}]}}}` + "\n", eventObject, 1700000000000000001},
		{`{"type":"MODIFIED","object":{"metadata":{"name":"x"}}}`, eventObject, 0},
		{`{"type":"DELETED","object":{}}`, eventObject, 0},
		{`{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"20"}}}`, eventBookmark, 0},
		{`{"type":"ERROR","object":{"kind":"Status","code":410,"message":"too old"}}`, eventError, 0},
		// Another field order still classifies, through a real decode.
		{`{"object":{},"type":"BOOKMARK"}`, eventBookmark, 0},
		{`garbage`, eventOther, 0},
	} {
		kind, at := classify([]byte(c.line))
		if kind != c.kind || at != c.at {
			t.Errorf("classify(%s) = %v, %d; want %v, %d", c.line, kind, at, c.kind, c.at)
		}
	}
	if got := errorMessage([]byte(`{"type":"ERROR","object":{"kind":"Status","code":410,"message":"too old"}}`)); got != "410 too old" {
		t.Errorf("errorMessage = %q", got)
	}
}
