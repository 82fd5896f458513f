package storagebench

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
	etcdfeature "k8s.io/apiserver/pkg/storage/feature"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
	"github.com/watchkeeper/watchkeeper/internal/histogram"
)

// watchListTimeout bounds one WatchList: upstream needs about a second.
const watchListTimeout = 30 * time.Second

// WatchList times sendInitialEvents watches of an idle resource holding
// objects: from the call to the bookmark that ends the initial events.
func WatchList(ctx context.Context, env Env, decorator string, objects, repeats int) ([]result.Result, error) {
	rec := result.NewRecorder("watchlist", Level, decorator, map[string]int{"objects": objects, "repeats": repeats})
	s, destroy, err := openFilled(ctx, env, decorator, "wl", objects)
	if err != nil {
		return nil, err
	}
	defer destroy()
	// Upstream refuses a watch stream until the etcd client has been probed
	// for progress requests, which happens in the background.
	if err := waitWatchProgressSupported(ctx); err != nil {
		return nil, err
	}
	sample := make([]time.Duration, 0, repeats)
	for range repeats {
		took, err := timeWatchList(ctx, s, objects)
		if err != nil {
			return nil, err
		}
		sample = append(sample, took)
	}
	rec.Add("initial_events_end_p50_ms", ms(histogram.SampleQuantile(sample, 0.5)), "ms", result.Lower)
	rec.Add("initial_events_end_max_ms", ms(histogram.SampleQuantile(sample, 1)), "ms", result.Lower)
	return rec.Results(), nil
}

func timeWatchList(ctx context.Context, s storage.Interface, objects int) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, watchListTimeout)
	defer cancel()
	pred := storage.Everything
	pred.AllowWatchBookmarks = true
	yes := true
	start := time.Now()
	w, err := s.Watch(ctx, resourcePrefix, storage.ListOptions{
		ResourceVersion:      "",
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		SendInitialEvents:    &yes,
		Predicate:            pred,
		Recursive:            true,
	})
	if err != nil {
		return 0, fmt.Errorf("watchlist: %w", err)
	}
	defer w.Stop()
	added := 0
	for {
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("no initial-events-end bookmark within %v (%d initial events seen)", watchListTimeout, added)
		case ev, ok := <-w.ResultChan():
			if !ok {
				return 0, fmt.Errorf("watchlist closed after %d initial events, before its bookmark", added)
			}
			switch ev.Type {
			case watch.Added:
				added++
			case watch.Bookmark:
				m, err := meta.Accessor(ev.Object)
				if err != nil || m.GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" {
					continue
				}
				took := time.Since(start)
				if added != objects {
					return 0, fmt.Errorf("initial-events-end after %d initial events, want %d", added, objects)
				}
				return took, nil
			case watch.Error:
				return 0, fmt.Errorf("watchlist error: %w", apierrors.FromObject(ev.Object))
			default:
				return 0, fmt.Errorf("unexpected %s event before the initial-events-end bookmark", ev.Type)
			}
		}
	}
}

func waitWatchProgressSupported(ctx context.Context) error {
	deadline := time.Now().Add(readyTimeout)
	for !etcdfeature.DefaultFeatureSupportChecker.Supports(storage.RequestWatchProgress) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("etcd client never reported RequestWatchProgress support")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}
