package install

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/apitesting/roundtrip"
	runtimeserializer "k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/randfill"

	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo"
)

// fuzzerFuncs keep fuzzed internal objects to what survives a trip through
// v1alpha1: decoding applies defaults, so a field left at a value the
// defaulter replaces would come back changed.
func fuzzerFuncs(runtimeserializer.CodecFactory) []interface{} {
	return []interface{}{
		func(s *demo.WidgetSpec, c randfill.Continue) {
			c.FillNoCustom(s)
			if s.Color == "" {
				s.Color = demo.WidgetColorBlue
			}
		},
	}
}

// TestRoundTripTypes converts fuzzed internal objects to v1alpha1 and back
// (JSON, YAML and CBOR) and requires them unchanged: the generated
// conversions, deep copies and defaults agree with the types.
func TestRoundTripTypes(t *testing.T) {
	roundtrip.RoundTripTestForAPIGroup(t, Install, fuzzerFuncs)
}
