package feed

import (
	"sync"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
)

// listedObjects is the cache's object for each listed item, in order. In
// compact form each is encoded and compressed (about 10 us a realistic
// pod), which a list of 100k pods would add to the start on one goroutine:
// there the items are held in contiguous runs by up to maxShareWorkers
// goroutines, as siblings.listed shares them, each run owned by one.
func (f *Feed) listedObjects(items []runtime.Object) ([]*objects.Object, error) {
	objs := make([]*objects.Object, len(items))
	workers := 1
	if f.cfg.Compactor != nil {
		workers = listWorkers(len(items), listWorkerLimit())
	}
	errs := make([]error, workers)
	run := func(w int) {
		lo, hi := w*len(items)/workers, (w+1)*len(items)/workers
		for i := lo; i < hi; i++ {
			var err error
			if objs[i], err = f.NewObject(items[i]); err != nil {
				errs[w] = err
				return
			}
		}
	}
	if workers == 1 {
		run(0)
	} else {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() { run(w) })
		}
		wg.Wait()
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return objs, nil
}
