package objects_test

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/storage"

	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
	"github.com/watchkeeper/watchkeeper/internal/fixtures"
)

// What compact form costs a realistic pod (2.8 KB of protobuf): Hold as it
// enters the cache, Get for each read (a list's item, an event fanned out).
func BenchmarkCompactRealisticPod(b *testing.B) {
	c, err := objects.NewCompactor(fixtures.CorePodCodec, storage.APIObjectVersioner{}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	const n = 1000
	pods := make([]*objects.Object, n)
	for i := range pods {
		pod := fixtures.RealisticPod(fmt.Sprintf("p%d", i), "ns", i, 0)
		pod.ResourceVersion = "7"
		if pods[i], err = c.Hold("k", pod, labels.Set(pod.Labels), fields.Set{}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("Hold", func(b *testing.B) {
		pod := fixtures.RealisticPod("p", "ns", 1, 0)
		pod.ResourceVersion = "7"
		for b.Loop() {
			if _, err := c.Hold("k", pod, nil, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Get", func(b *testing.B) {
		i := 0
		for b.Loop() {
			if _, err := pods[i%n].Get(); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}
