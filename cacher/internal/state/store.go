package state

import (
	"fmt"

	"k8s.io/client-go/tools/cache"

	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
)

// newStore is the cache of current objects: a thread-safe indexer of
// *object keyed by storage key, with the resource's indexers applied to the
// wrapped object.
func newStore(indexers *cache.Indexers) cache.Indexer {
	wrapped := cache.Indexers{}
	if indexers != nil {
		for name, f := range *indexers {
			wrapped[name] = unwrapIndexFunc(name, f)
		}
	}
	return cache.NewIndexer(objectKey, wrapped)
}

func objectKey(obj any) (string, error) {
	o, ok := obj.(*objects.Object)
	if !ok {
		return "", fmt.Errorf("watch cache store holds %T, not *object", obj)
	}
	return o.Key, nil
}

func unwrapIndexFunc(name string, f cache.IndexFunc) cache.IndexFunc {
	return func(obj any) ([]string, error) {
		o, ok := obj.(*objects.Object)
		if !ok {
			return nil, fmt.Errorf("watch cache store holds %T, not *object", obj)
		}
		return o.IndexValues(name, f)
	}
}
