package feed

import (
	"context"
	goerrors "errors"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/grpc/metadata"
	"k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"

	"github.com/watchkeeper/watchkeeper/cacher/internal/objects"
)

// backfillTimeout bounds one backfill: a resume waits at most this long
// before it gets the 410 it would have got without one.
const backfillTimeout = 10 * time.Second

// BackfillCooldown: for this long after a backfill failed, resumes from
// before the list get their 410 at once. Another backfill would most
// likely fail the same way (etcd too slow while every client reconnects,
// or the RV compacted away), and each one made a new wave of resumes wait
// up to backfillTimeout for the 410 that upstream's cache gives at once:
// at 1,000 nodes nearly every kubelet's pod watch resumed that way.
const BackfillCooldown = backfillTimeout

// errBackfillCoolingDown: a backfill failed less than backfillCooldown ago.
var errBackfillCoolingDown = fmt.Errorf("a history backfill failed less than %v ago", BackfillCooldown)

// errBackfillTooFar: the resume is further behind than
// Config.BackfillMaxRevisions.
var errBackfillTooFar = goerrors.New("too far behind the cache for a backfill")

// Backfill fills the history between rv and its start from etcd, when the
// start is the cache's (re)list rather than history given up for room. A
// client resuming from an RV just before the list (its apiserver restarted,
// or the cache relisted after an etcd outage) then continues without a
// relist, as it would have against the old cache.
//
// A resume more than BackfillMaxRevisions behind the cache is not
// backfilled: etcd would read every revision since, of every resource,
// under its read lock (cacher.DefaultBackfillMaxRevisions).
//
// Resumes share the work: one backfill runs at a time per resource, on the
// cache's own context (bounded by backfillTimeout), and those that arrive
// while it runs and need older RVs are taken by the next run, which reaches
// back to the oldest of them. N clients resuming from old RVs cost at most
// one backfill at a time. Each caller waits only as long as its own
// context allows, and not at all for backfillCooldown after one failed.
func (f *Feed) Backfill(ctx context.Context, rv uint64) error {
	b := &f.backfills
	for {
		start, fromList := f.state.HistoryStart()
		if !fromList || rv >= start {
			return nil
		}
		if n, behind := f.cfg.BackfillMaxRevisions, f.state.CurrentRV()-rv; n > 0 && behind > n {
			f.metrics.BackfillTooFar.Inc()
			return fmt.Errorf("resume from %d, %d revisions behind the cache (at most %d): %w", rv, behind, n, errBackfillTooFar)
		}
		run, err := b.join(rv, f.clock.Now(), f.stopping(), f.startBackfill)
		if goerrors.Is(err, errBackfillerStopped) {
			return fmt.Errorf("watch cache of %v stopped", f.cfg.GroupResource)
		}
		if err != nil {
			return err
		}
		select {
		case <-run.done:
		case <-ctx.Done():
			err = ctx.Err()
		}
		b.leave()
		if err != nil {
			return err
		}
		if run.from <= rv {
			return run.err
		}
		// That run did not reach back far enough: the next one takes rv.
	}
}

// backfillAfterList starts reading the history back from etcd to
// ListBackfillRevisions before a list at rv, and returns at once: clients
// resuming from there later find their events in memory, or wait for this
// run as for any other. See Config.ListBackfillRevisions.
func (f *Feed) backfillAfterList(rv uint64) {
	n := f.cfg.ListBackfillRevisions
	if n == 0 || rv <= 1 {
		return
	}
	f.backfills.startAfterList(rv-min(n, rv-1), f.stopping(), func(from uint64) *backfillRun {
		return f.startBackfill(from, true)
	})
}

// startBackfill starts a backfill from rv on a goroutine of the cache's;
// the backfiller calls it, under its lock, to make its running one.
func (f *Feed) startBackfill(rv uint64, afterList bool) *backfillRun {
	run := &backfillRun{from: rv, afterList: afterList, done: make(chan struct{})}
	f.wg.Add(1)
	go f.runBackfill(run)
	return run
}

// runBackfill is the goroutine of one backfill; the cache's WaitGroup
// owns it and Stop ends it through the cache's context.
func (f *Feed) runBackfill(run *backfillRun) {
	defer f.wg.Done()
	ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(f.ctx, f.backfillMetadata), backfillTimeout)
	run.err = f.fillHistory(ctx, run.from, run.afterList)
	cancel()
	f.backfills.finished(run, f.clock.Now())
	switch {
	case run.err == nil:
		f.metrics.Backfilled.Inc()
	case run.afterList:
		f.metrics.BackfillFailed.Inc()
		log := f.logger
		if f.stopping() {
			// Stopped under it (kube-apiserver builds some storages it
			// then destroys): nothing any client will miss.
			log = log.V(4)
		}
		log.Info("Watch cache history backfill after the list failed; resumes from before the list backfill on demand",
			"from", run.from, "err", run.err)
	default:
		f.metrics.BackfillFailed.Inc()
		// Its waiting clients, and those resuming for backfillCooldown,
		// relist: one line per failure, at most one per cooldown.
		f.logger.Info("Watch cache history backfill failed; resumes from before the list get 410 Expired for a while",
			"from", run.from, "cooldown", BackfillCooldown, "err", run.err)
	}
	close(run.done)
}

// fillHistory reads etcd's events after rv up to the history's start and,
// as they arrive, etcd's state at rv of the objects they change, which
// selectors need (pastStateReader); then it prepends the events. If etcd
// has compacted rv away a read fails and the clients get their 410, as
// they should.
func (f *Feed) fillHistory(ctx context.Context, rv uint64, afterList bool) error {
	start, fromList := f.state.HistoryStart()
	if !fromList || rv >= start {
		return nil
	}
	began := f.clock.Now()
	past := f.newPastStateReader(ctx, rv)
	events, err := f.eventsBetween(ctx, rv, start, past.add)
	evsTook := f.clock.Since(began)
	state, read, stateErr := past.result(err == nil)
	if err != nil {
		return fmt.Errorf("%w (etcd's state at %d: %s)", err, rv, read)
	}
	if stateErr != nil {
		return fmt.Errorf("reading etcd's state at %d (%s) for %d events read in %v: %w", rv, read, len(events), evsTook, stateErr)
	}
	f.linkBackfill(events, state)
	f.shareWithState(events)

	if err := f.state.PrependHistory(events, rv, start, f.clock.Now()); err != nil {
		return err
	}
	f.logger.Info("Backfilled the watch cache history from etcd", "afterList", afterList,
		"from", rv, "to", start, "events", len(events), "eventsTook", evsTook,
		"state", read.String(), "took", f.clock.Since(began))
	return nil
}

// linkBackfill replays events on state, etcd's at their start, so each
// knows the object it changed.
func (f *Feed) linkBackfill(events []*objects.Event, state map[string]*objects.Object) {
	for _, e := range events {
		f.linkPrev(e, state[e.Cur.Key])
		if e.Type == watch.Deleted {
			delete(state, e.Cur.Key)
		} else {
			state[e.Cur.Key] = e.Cur
		}
	}
}

// shareWithState makes each backfilled event whose object is the version
// the state holds under its key hold the state's object. After a list the
// newest of those events carry the very versions the list just read (at a
// restart, most of the backfill's 2,000 revisions), which would otherwise
// be held twice, decoded once by the list and once by the backfill. No
// later event of the backfill concerns such a key (the state's version is
// its newest up to the history's start), so the links between events stay
// as linkBackfill made them.
func (f *Feed) shareWithState(events []*objects.Event) {
	for _, e := range events {
		if e.Type == watch.Deleted || e.Cur == nil {
			continue
		}
		held := f.state.Peek(e.Cur.Key)
		if held == nil || held == e.Cur {
			continue
		}
		if rv, err := held.RV(f.cfg.Versioner); err == nil && rv == e.RV {
			e.Cur = held
		}
	}
}

// stateAt is etcd's state of the whole resource at rv, by key.
func (f *Feed) stateAt(ctx context.Context, rv uint64) (map[string]*objects.Object, error) {
	objs, _, err := f.listStorage(ctx, f.cfg.ResourcePrefix, exactRead(rv, true), nil)
	if err != nil {
		return nil, err
	}
	state := make(map[string]*objects.Object, len(objs))
	for _, o := range objs {
		state[o.Key] = o
	}
	return state, nil
}

// exactRead is a read of etcd at rv exactly, of a key or of every key
// under it.
func exactRead(rv uint64, recursive bool) storage.ListOptions {
	return storage.ListOptions{
		ResourceVersion: strconv.FormatUint(rv, 10), ResourceVersionMatch: metav1.ResourceVersionMatchExact,
		Recursive: recursive, Predicate: storage.Everything,
	}
}

// eventsBetween reads etcd's events in (from, to] on a watch of its own,
// handing each to each as it comes.
// It asks for progress until it has seen to, since a quiet resource sends
// no event past it. At most the history's capacity is read.
func (f *Feed) eventsBetween(ctx context.Context, from, to uint64, each func(*objects.Event)) ([]*objects.Event, error) {
	w, err := f.storage.Watch(ctx, f.cfg.ResourcePrefix, f.storageWatchOptions(from))
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	progress := f.clock.NewTicker(ProgressRequestPeriod)
	defer progress.Stop()
	var events []*objects.Event
	now := f.clock.Now()
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("backfilling %v from %d to %d: %d events read in %v: %w", f.cfg.GroupResource, from, to, len(events), f.clock.Since(now), ctx.Err())
		case <-progress.C():
			//lint:ignore SA1019 upstream's cacher asks for progress through it too; storage.Interface has no other way yet
			if err := f.storage.RequestWatchProgress(ctx); err != nil {
				f.logger.V(4).Info("Backfill progress request failed", "err", err)
			}
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil, fmt.Errorf("backfilling %v: the etcd watch closed", f.cfg.GroupResource)
			}
			switch ev.Type {
			case watch.Error:
				return nil, errors.FromObject(ev.Object)
			case watch.Bookmark:
				if rv, err := f.cfg.Versioner.ObjectResourceVersion(ev.Object); err == nil && rv >= to {
					return events, nil
				}
				continue
			}
			e, err := f.newEvent(ev, now, nil)
			if err != nil {
				return nil, err
			}
			if e.RV > to {
				return events, nil
			}
			if len(events) == f.cfg.HistoryCapacity {
				return nil, fmt.Errorf("backfilling %v: more than %d events between %d and %d", f.cfg.GroupResource, f.cfg.HistoryCapacity, from, to)
			}
			events = append(events, e)
			each(e)
			if e.RV == to {
				return events, nil
			}
		}
	}
}
