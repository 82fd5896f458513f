package main

import (
	"context"
	"time"

	"github.com/watchkeeper/watchkeeper/hack/bench/internal/result"
)

// scenarioFuncs are one level's scenarios, each taking that level's Env E.
// A level leaves out (nil) the scenarios it does not have.
type scenarioFuncs[E any] struct {
	idle      func(ctx context.Context, env E, decorator string, watchers int) ([]result.Result, error)
	bookmarks func(ctx context.Context, env E, decorator string, watchers int, period time.Duration) ([]result.Result, error)
	fanout    func(ctx context.Context, env E, decorator string, watchers, events int) ([]result.Result, error)
	list      func(ctx context.Context, env E, decorator string, objects, repeats int, exactAge time.Duration) ([]result.Result, error)
	watchlist func(ctx context.Context, env E, decorator string, objects, repeats int) ([]result.Result, error)
	exactkey  func(ctx context.Context, env E, decorator string, watchers, objects, events int) ([]result.Result, error)
	// storm's nodes are also its WatchLists, one per node.
	storm func(ctx context.Context, env E, decorator string, objects, nodes, rate int) ([]result.Result, error)
	// memory's kind is the kind of object (storagebench.MemoryKinds).
	memory func(ctx context.Context, env E, decorator string, objects int, kind string) ([]result.Result, error)
	// sharded's watchers each watch their own shard of the resource.
	sharded func(ctx context.Context, env E, decorator string, watchers, events int) ([]result.Result, error)
	// prevkv runs under the feature gates the run set (runSpec.FeatureGates).
	prevkv func(ctx context.Context, env E, decorator string, objects int) ([]result.Result, error)
	// slowtax's watchers are the fast ones; slow never read.
	slowtax func(ctx context.Context, env E, decorator string, watchers, slow, events, rate int) ([]result.Result, error)
	// restart's watchers are its resources, each of objects objects.
	restart func(ctx context.Context, env E, decorator string, resources, objects, events int) ([]result.Result, error)
	budget  func(ctx context.Context, env E, decorator string, objects int) ([]result.Result, error)
}

// run runs r's scenario with env, at r's sizes; ok is false when the level
// has no scenario of that name.
func (l scenarioFuncs[E]) run(ctx context.Context, env E, r runSpec) (rs []result.Result, ok bool, err error) {
	switch {
	case r.Scenario == "idle" && l.idle != nil:
		rs, err = l.idle(ctx, env, r.Decorator, r.Watchers)
	case r.Scenario == "bookmarks" && l.bookmarks != nil:
		rs, err = l.bookmarks(ctx, env, r.Decorator, r.Watchers, r.Period)
	case r.Scenario == "fanout" && l.fanout != nil:
		rs, err = l.fanout(ctx, env, r.Decorator, r.Watchers, r.Events)
	case r.Scenario == "list" && l.list != nil:
		rs, err = l.list(ctx, env, r.Decorator, r.Objects, r.Repeats, r.Period)
	case r.Scenario == "watchlist" && l.watchlist != nil:
		rs, err = l.watchlist(ctx, env, r.Decorator, r.Objects, r.Repeats)
	case r.Scenario == "exactkey" && l.exactkey != nil:
		rs, err = l.exactkey(ctx, env, r.Decorator, r.Watchers, r.Objects, r.Events)
	case r.Scenario == "storm" && l.storm != nil:
		rs, err = l.storm(ctx, env, r.Decorator, r.Objects, r.Watchers, r.Rate)
	case r.Scenario == "memory" && l.memory != nil:
		rs, err = l.memory(ctx, env, r.Decorator, r.Objects, r.Kind)
	case r.Scenario == "sharded" && l.sharded != nil:
		rs, err = l.sharded(ctx, env, r.Decorator, r.Watchers, r.Events)
	case r.Scenario == "prevkv" && l.prevkv != nil:
		rs, err = l.prevkv(ctx, env, r.Decorator, r.Objects)
	case r.Scenario == "slowtax" && l.slowtax != nil:
		rs, err = l.slowtax(ctx, env, r.Decorator, r.Watchers, r.Objects, r.Events, r.Rate)
	case r.Scenario == "restart" && l.restart != nil:
		rs, err = l.restart(ctx, env, r.Decorator, r.Watchers, r.Objects, r.Events)
	case r.Scenario == "budget" && l.budget != nil:
		rs, err = l.budget(ctx, env, r.Decorator, r.Objects)
	default:
		return nil, false, nil
	}
	return rs, true, err
}
