package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/apis/demo/v1alpha1"
	v1alpha1client "github.com/watchkeeper/watchkeeper/sample-apiserver/pkg/generated/clientset/versioned/typed/demo/v1alpha1"
)

// Linearizability clients (-lin-clients) write and read a few widgets of
// their own namespace through every replica, as etcd's robustness suite's
// clients do against etcd: creates, updates and deletes with the
// resourceVersion they last saw as precondition, consistent GETs and LISTs
// (RV ""), and reads at RV "0", which are not linearizable by contract and
// are only measured for staleness. Every operation is recorded with when
// it was called and when it returned; lin_check.go checks the history with
// porcupine against a key-value model.
const (
	linNamespace = "soak-lin"
	// opAnnotation carries the operation that wrote a version: a write
	// whose answer was lost (a timeout, a broken connection) is found in
	// etcd's history by it, or known not to have happened.
	opAnnotation = "soak.watchkeeper.io/op"
)

func linKeyName(k int) string { return fmt.Sprintf("lin-%02d", k) }

type linKind uint8

const (
	linGet linKind = iota + 1
	linList
	linCreate
	linUpdate
	linDelete
)

var linKindNames = map[linKind]string{linGet: "get", linList: "list", linCreate: "create", linUpdate: "update", linDelete: "delete"}

// linCode is how an operation ended.
type linCode uint8

const (
	codeOK linCode = iota + 1
	codeConflict
	codeNotFound
	codeExists
	// codeUnknown: a write with no answer; it may or may not have happened.
	codeUnknown
)

var linCodeNames = map[linCode]string{codeOK: "ok", codeConflict: "conflict", codeNotFound: "notfound", codeExists: "exists", codeUnknown: "unknown"}

// linOp is one operation as a client saw it.
type linOp struct {
	client  int
	replica int
	kind    linKind
	key     int    // the widget, lin-<key>; -1 for a LIST
	precond uint64 // an update's or delete's resourceVersion precondition
	token   string // a create's or update's opAnnotation
	rv0     bool   // a read at RV "0": staleness only

	call, ret time.Time
	// seen is the checker's record of etcd at the call: every revision up
	// to it was committed before the call.
	seen uint64

	code   linCode
	rv     uint64         // what a write made, or the version a GET got (0: absent)
	items  map[int]uint64 // a LIST's: key -> resourceVersion
	listRV uint64
	// planted marks the -plant stale-read read: made at RV "0", recorded
	// as consistent.
	planted bool
}

// linRecorder keeps every client's operations.
type linRecorder struct {
	mu  sync.Mutex
	ops []linOp
	// errors are reads that failed (not in the history: a failed read
	// has no effect) by code.
	errors  map[string]int
	lastErr string
}

func newLinRecorder() *linRecorder { return &linRecorder{errors: map[string]int{}} }

func (r *linRecorder) add(op linOp) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

func (r *linRecorder) failed(err error) {
	r.mu.Lock()
	r.errors[errorCode(err)]++
	r.lastErr = err.Error()
	r.mu.Unlock()
}

func (r *linRecorder) snapshot() []linOp {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]linOp(nil), r.ops...)
}

// errorCode is an error's HTTP status, "timeout" for the client's own
// deadline, "reset" for an HTTP/2 stream the server reset (the apiserver's
// timeout filter does that to a request past its deadline whose answer had
// begun), or "transport".
func errorCode(err error) string {
	var st apierrors.APIStatus
	var reset http2.StreamError
	switch {
	case errors.As(err, &st):
		return strconv.Itoa(int(st.Status().Code))
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.As(err, &reset):
		return "reset"
	}
	return "transport"
}

// linDo runs op against widgets and fills in its outcome; false when the
// operation is a read that failed (nothing to record).
func linDo(ctx context.Context, widgets v1alpha1client.WidgetInterface, op *linOp, nkeys int, rec *linRecorder, seen func() uint64) bool {
	op.seen = seen()
	op.call = time.Now()
	var err error
	var got *v1alpha1.Widget
	switch op.kind {
	case linGet:
		opts := metav1.GetOptions{}
		if op.rv0 || op.planted {
			opts.ResourceVersion = "0"
		}
		got, err = widgets.Get(ctx, linKeyName(op.key), opts)
		op.ret = time.Now()
		switch {
		case err == nil:
			op.code, op.rv = codeOK, parseRV(got.ResourceVersion)
		case apierrors.IsNotFound(err):
			op.code, op.rv = codeOK, 0
		default:
			rec.failed(err)
			return false
		}
		return true
	case linList:
		opts := metav1.ListOptions{}
		if op.rv0 {
			opts.ResourceVersion = "0"
		}
		l, err := widgets.List(ctx, opts)
		op.ret = time.Now()
		if err != nil {
			rec.failed(err)
			return false
		}
		op.code, op.listRV, op.items = codeOK, parseRV(l.ResourceVersion), map[int]uint64{}
		for i := range l.Items {
			for k := range nkeys {
				if l.Items[i].Name == linKeyName(k) {
					op.items[k] = parseRV(l.Items[i].ResourceVersion)
				}
			}
		}
		return true
	case linCreate:
		w := &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Name: linKeyName(op.key), Namespace: linNamespace,
			Labels: map[string]string{"app": "lin"}, Annotations: map[string]string{opAnnotation: op.token}}}
		w.Spec.Size = int32(1 + rand.IntN(1000))
		got, err = widgets.Create(ctx, w, metav1.CreateOptions{})
	case linUpdate:
		w := &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Name: linKeyName(op.key), Namespace: linNamespace, ResourceVersion: uintString(op.precond),
			Labels: map[string]string{"app": "lin"}, Annotations: map[string]string{opAnnotation: op.token}}}
		w.Spec.Size = int32(1 + rand.IntN(1000))
		got, err = widgets.Update(ctx, w, metav1.UpdateOptions{})
	case linDelete:
		rv := uintString(op.precond)
		err = widgets.Delete(ctx, linKeyName(op.key), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
	}
	op.ret = time.Now()
	switch {
	case err == nil:
		op.code = codeOK
		if got != nil {
			op.rv = parseRV(got.ResourceVersion)
		}
	case apierrors.IsAlreadyExists(err):
		op.code = codeExists
	case apierrors.IsConflict(err):
		op.code = codeConflict
	case apierrors.IsNotFound(err):
		op.code = codeNotFound
	default:
		op.code = codeUnknown
		rec.failed(err)
	}
	return true
}

// linClient runs operations until ctx ends, through its home replica and
// the next one after an error.
func linClient(ctx context.Context, set *replicaSet, home, id, nkeys int, rec *linRecorder, seen func() uint64) {
	known := make([]uint64, nkeys) // the last version seen of each key, 0: absent or unknown
	cur, seq := home, 0
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			return
		case <-time.After(100*time.Millisecond + rand.N(200*time.Millisecond)):
		}
		at, cs, ok := set.client(cur)
		if !ok {
			continue
		}
		cur = at
		widgets := cs.DemoV1alpha1().Widgets(linNamespace)
		seq++
		op := linOp{client: id, replica: at, key: rand.IntN(nkeys), token: fmt.Sprintf("c%d-%d", id, seq)}
		switch n := rand.IntN(100); {
		case n < 30 && known[op.key] == 0:
			op.kind = linCreate
		case n < 22:
			op.kind, op.precond = linUpdate, known[op.key]
		case n < 30:
			op.kind, op.precond = linDelete, known[op.key]
		case n < 60:
			op.kind = linGet
		case n < 75:
			op.kind, op.key = linList, -1
		case n < 88:
			op.kind, op.rv0 = linGet, true
		default:
			op.kind, op.key, op.rv0 = linList, -1, true
		}
		if op.kind == linGet && !op.rv0 && take(&planted.staleRead) {
			plantStaleRead(ctx, set, at, id, nkeys, rec, seen)
			continue
		}
		if !linDo(ctx, widgets, &op, nkeys, rec, seen) {
			cur = set.next(cur)
			continue
		}
		// A write cut short by the end of the run is recorded all the
		// same: it may have happened, and etcd's history will say.
		rec.add(op)
		switch {
		case op.kind == linList && !op.rv0:
			for k := range known {
				known[k] = op.items[k]
			}
		case op.kind == linGet && !op.rv0, op.code == codeOK && (op.kind == linCreate || op.kind == linUpdate):
			known[op.key] = op.rv
		case op.kind == linDelete && op.code == codeOK, op.code == codeNotFound, op.code == codeUnknown:
			known[op.key] = 0
		}
		if op.code == codeUnknown {
			cur = set.next(cur)
		}
	}
}

// plantStaleRead is -plant stale-read: it updates a key through one replica
// and at once reads it back through another at RV "0", recording the read
// as consistent, until the read misses the update (or 500 tries).
func plantStaleRead(ctx context.Context, set *replicaSet, at, id, nkeys int, rec *linRecorder, seen func() uint64) {
	for try := range 500 {
		_, cs, ok := set.client(at)
		if !ok {
			return
		}
		other, cs2, ok := set.client(set.next(at))
		if !ok {
			return
		}
		k := rand.IntN(nkeys)
		get := linOp{client: id, replica: at, kind: linGet, key: k}
		if !linDo(ctx, cs.DemoV1alpha1().Widgets(linNamespace), &get, nkeys, rec, seen) {
			continue
		}
		rec.add(get)
		w := linOp{client: id, replica: at, kind: linUpdate, key: k, precond: get.rv, token: fmt.Sprintf("c%d-plant-%d", id, try)}
		if get.rv == 0 {
			w.kind = linCreate
		}
		linDo(ctx, cs.DemoV1alpha1().Widgets(linNamespace), &w, nkeys, rec, seen)
		rec.add(w)
		if w.code != codeOK {
			continue
		}
		stale := linOp{client: id, replica: other, kind: linGet, key: k, planted: true}
		if !linDo(ctx, cs2.DemoV1alpha1().Widgets(linNamespace), &stale, nkeys, rec, seen) {
			continue
		}
		rec.add(stale)
		if stale.rv != w.rv {
			logf("planted bug: a consistent GET of %s through replica %d answered @%d after the update to @%d had returned (try %d)", linKeyName(k), other, stale.rv, w.rv, try+1)
			return
		}
	}
	logf("planted bug: no stale read in 500 tries")
}

// linStates are the linearizability clients' LISTs as watcher records of
// states, one per client, for the state check of check.go: each LIST must
// hold exactly the truth's widgets of the namespace at its RV.
func linStates(ops []linOp, keys *keyTable) []*watcherRec {
	sp, err := newSpec(linNamespace, "", "")
	if err != nil {
		return nil // no selector to parse: cannot happen
	}
	byClient := map[int]*watcherRec{}
	var out []*watcherRec
	for _, op := range ops {
		if op.kind != linList {
			continue
		}
		r := byClient[op.client]
		if r == nil {
			r = &watcherRec{kind: "lin-list", spec: sp}
			byClient[op.client] = r
			out = append(out, r)
		}
		items := make([]item, 0, len(op.items))
		for k, rv := range op.items {
			items = append(items, item{key: keys.id(linNamespace + "/" + linKeyName(k)), rv: rv})
		}
		r.addState(op.listRV, items)
	}
	return out
}
