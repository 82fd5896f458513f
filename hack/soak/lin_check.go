package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
	"k8s.io/apimachinery/pkg/watch"
)

// The linearizability check: the consistent operations of lin.go, each a
// single-key operation (a LIST is a GET of every key at once, checked key by
// key; that its items are one state, the truth's at its RV, is the state
// check of check.go), against a model of one widget: absent (0) or at a
// resourceVersion. Writes whose answer was lost are looked up in etcd's
// history by their op annotation (or, for a delete, by the version it
// deleted): found, they happened by the time the checker's watch got them;
// not found, they did not happen and leave the history.

type linInput struct {
	kind    linKind
	key     int
	precond uint64
}

type linOutput struct {
	code linCode
	rv   uint64
}

// linModel is one widget, partitioned by key.
var linModel = porcupine.Model{
	Init: func() any { return uint64(0) },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(uint64), input.(linInput), output.(linOutput)
		switch in.kind {
		case linGet:
			return out.code == codeOK && out.rv == st, st
		case linCreate:
			switch out.code {
			case codeOK:
				return st == 0, out.rv
			case codeExists:
				return st != 0, st
			}
		case linUpdate, linDelete:
			switch out.code {
			case codeOK:
				if in.kind == linDelete {
					return st != 0 && st == in.precond, uint64(0)
				}
				return st != 0 && st == in.precond, out.rv
			case codeConflict:
				return st != 0 && st != in.precond, st
			case codeNotFound:
				return st == 0, st
			}
		}
		return false, st
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(linInput), output.(linOutput)
		s := linKindNames[in.kind] + " " + linKeyName(in.key)
		if in.kind == linUpdate || in.kind == linDelete {
			s += fmt.Sprintf(" if @%d", in.precond)
		}
		if out.code != codeOK {
			return s + " -> " + linCodeNames[out.code]
		}
		if in.kind == linDelete {
			return s + " -> ok"
		}
		if out.rv == 0 {
			return s + " -> absent"
		}
		return fmt.Sprintf("%s -> @%d", s, out.rv)
	},
	DescribeState: func(state any) string {
		if st := state.(uint64); st != 0 {
			return fmt.Sprintf("@%d", st)
		}
		return "absent"
	},
}

// linReport is what the check found.
type linReport struct {
	ops, writes, gets, lists int
	// unknown writes, and those found in etcd's history.
	unknown, happened int
	verdict           porcupine.CheckResult
	// perKey is each key's verdict, operations and search time.
	perKey []string
	// unsettled are the files holding the histories of keys whose search
	// timed out.
	unsettled []string
	// failing is the smallest failing part of an illegal history, one line
	// per operation; visualization its HTML (porcupine's), where saved.
	failing       []string
	visualization string
	// staleConsistent counts consistent LISTs answered at an RV below a
	// revision etcd had committed before the call.
	staleConsistent int
	// RV "0" reads, those that missed a change committed before the call,
	// and by how much.
	rv0Reads, rv0Stale int
	behindRevs         []uint64
	behindTime         []time.Duration
}

func (r *linReport) String() string {
	return fmt.Sprintf("lin_ops=%d (writes=%d gets=%d lists=%d unknown_writes=%d happened=%d) linearizable=%s stale_consistent_reads=%d "+
		"rv0_reads=%d rv0_stale=%d rv0_behind_revs=%s rv0_behind_ms=%s",
		r.ops, r.writes, r.gets, r.lists, r.unknown, r.happened, r.verdict, r.staleConsistent,
		r.rv0Reads, r.rv0Stale, quantiles(r.behindRevs, func(v uint64) string { return fmt.Sprint(v) }),
		quantiles(r.behindTime, func(d time.Duration) string { return fmt.Sprint(d.Milliseconds()) }))
}

// quantiles is "p50/p99/max" of vs, "-" when empty.
func quantiles[T uint64 | time.Duration](vs []T, format func(T) string) string {
	if len(vs) == 0 {
		return "-"
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	at := func(q float64) T { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return format(at(0.5)) + "/" + format(at(0.99)) + "/" + format(s[len(s)-1])
}

// checkLinearizability checks ops against the truth; dir receives the
// visualization of a failure.
func checkLinearizability(ops []linOp, events []truthEvent, keys *keyTable, nkeys int, start time.Time, dir string, timeout time.Duration) *linReport {
	rep := &linReport{verdict: porcupine.Ok}
	// The truth of the lin widgets: who wrote each version, what deleted
	// each, and every change of each key in order.
	keyOf := map[int32]int{}
	for k := range nkeys {
		keyOf[keys.id(linNamespace+"/"+linKeyName(k))] = k
	}
	type landed struct {
		rev uint64
		at  time.Time
	}
	byToken := map[string]landed{}
	type deletion struct {
		key     int
		deleted uint64
	}
	deletions := map[deletion]landed{}
	perKey := make([][]truthEvent, nkeys)
	for _, e := range events {
		k, ok := keyOf[e.key]
		if !ok {
			continue
		}
		perKey[k] = append(perKey[k], e)
		if e.cur != nil && e.cur.token != "" {
			byToken[e.cur.token] = landed{e.rev, e.at}
		}
		if e.typ == watch.Deleted && e.prev != nil {
			deletions[deletion{k, e.prev.rv}] = landed{e.rev, e.at}
		}
	}
	claimed := map[deletion]bool{}
	for _, op := range ops {
		if op.kind == linDelete && op.code == codeOK {
			claimed[deletion{op.key, op.precond}] = true
		}
	}

	ns := func(t time.Time) int64 { return int64(t.Sub(start)) }
	parts := make([][]porcupine.Operation, nkeys)
	addOp := func(op linOp, k int, in linInput, out linOutput, ret time.Time) {
		parts[k] = append(parts[k], porcupine.Operation{ClientId: op.client, Input: in, Output: out, Call: ns(op.call), Return: ns(ret),
			Metadata: fmt.Sprintf("replica %d", op.replica)})
	}
	for _, op := range ops {
		if op.rv0 {
			rep.rv0Reads++
			staleness(rep, op, events, perKey)
			continue
		}
		rep.ops++
		switch op.kind {
		case linGet:
			rep.gets++
			addOp(op, op.key, linInput{kind: linGet, key: op.key}, linOutput{codeOK, op.rv}, op.ret)
		case linList:
			rep.lists++
			if op.listRV < op.seen {
				rep.staleConsistent++
				rep.failing = append(rep.failing, fmt.Sprintf("consistent LIST by client %d through replica %d at RV %d, below revision %d etcd had committed before the call",
					op.client, op.replica, op.listRV, op.seen))
			}
			for k := range nkeys {
				addOp(op, k, linInput{kind: linGet, key: k}, linOutput{codeOK, op.items[k]}, op.ret)
			}
		default:
			rep.writes++
			in := linInput{kind: op.kind, key: op.key, precond: op.precond}
			if op.code != codeUnknown {
				addOp(op, op.key, in, linOutput{op.code, op.rv}, op.ret)
				continue
			}
			rep.unknown++
			var l landed
			found := false
			if op.kind == linDelete {
				d := deletion{op.key, op.precond}
				l, found = deletions[d]
				found = found && !claimed[d]
				claimed[d] = claimed[d] || found
			} else {
				l, found = byToken[op.token]
			}
			if !found {
				continue // it did not happen: no effect, no place in the history
			}
			rep.happened++
			addOp(op, op.key, in, linOutput{codeOK, l.rev}, later(op.call, l.at))
		}
	}

	// Each key's history on its own (porcupine's own partitioning would not
	// say which key failed), one at a time: a search that cannot settle a
	// history grows its memory by tens of MB a second until the timeout
	// (upstream's 30-minute chaos history took 15 GB in a minute with all
	// eight keys at once), so the timeout bounds one search's memory only
	// if the searches do not run side by side.
	for k, part := range parts {
		if len(part) == 0 {
			continue
		}
		began := time.Now()
		res := porcupine.CheckOperationsTimeout(linModel, part, timeout)
		rep.perKey = append(rep.perKey, fmt.Sprintf("%s:%s:%d:%s", linKeyName(k), res, len(part), time.Since(began).Round(time.Millisecond)))
		switch {
		case res == porcupine.Illegal:
			rep.verdict = porcupine.Illegal
			smallest := smallestIllegal(part, timeout)
			rep.failing = append(rep.failing, describeOps(linKeyName(k), smallest)...)
			if _, info := porcupine.CheckOperationsVerbose(linModel, smallest, timeout); dir != "" {
				path := filepath.Join(dir, "lin-"+linKeyName(k)+".html")
				if err := porcupine.VisualizePath(linModel, info, path); err == nil && rep.visualization == "" {
					rep.visualization = path
				}
			}
		case res == porcupine.Unknown:
			if rep.verdict == porcupine.Ok {
				rep.verdict = porcupine.Unknown
			}
			// The whole history, to study why it would not settle.
			if dir != "" {
				path := filepath.Join(dir, "lin-"+linKeyName(k)+"-unknown.txt")
				if err := os.WriteFile(path, []byte(strings.Join(listOps(part), "\n")+"\n"), 0o644); err == nil {
					rep.unsettled = append(rep.unsettled, path)
				}
			}
		}
	}
	return rep
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// smallestIllegal is the shortest prefix of an illegal history (the
// operations that returned by some time) that is already illegal: binary
// search over the return times, then checked; the whole history if the
// search lands on a legal prefix.
func smallestIllegal(ops []porcupine.Operation, timeout time.Duration) []porcupine.Operation {
	sorted := slices.Clone(ops)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Return < sorted[j].Return })
	illegal := func(n int) bool {
		return porcupine.CheckOperationsTimeout(linModel, sorted[:n], timeout) == porcupine.Illegal
	}
	n := sort.Search(len(sorted), func(n int) bool { return n > 0 && illegal(n) })
	if n == 0 || n > len(sorted) || !illegal(n) {
		return ops
	}
	return sorted[:n]
}

// describeOps is the last operations of a failing history, one line each,
// by call time: what the failure is made of.
func describeOps(key string, ops []porcupine.Operation) []string {
	lines := listOps(ops)
	lines = lines[max(0, len(lines)-12):]
	return append([]string{fmt.Sprintf("%s: the shortest history that is not linearizable ends with (times since the start):", key)}, lines...)
}

// listOps is a line per operation, by call time.
func listOps(ops []porcupine.Operation) []string {
	sorted := slices.Clone(ops)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Call < sorted[j].Call })
	out := make([]string, 0, len(sorted))
	for _, op := range sorted {
		out = append(out, fmt.Sprintf("  client %d (%s) [%v, %v] %s", op.ClientId, op.Metadata,
			time.Duration(op.Call).Round(time.Millisecond), time.Duration(op.Return).Round(time.Millisecond),
			linModel.DescribeOperation(op.Input, op.Output)))
	}
	return out
}

// staleness measures an RV "0" read against what etcd had committed
// before it was called: how many revisions and how long it was behind.
func staleness(rep *linReport, op linOp, events []truthEvent, perKey [][]truthEvent) {
	switch op.kind {
	case linList:
		// The first change the LIST's RV does not cover, if etcd had it
		// before the call.
		i := sort.Search(len(events), func(i int) bool { return events[i].rev > op.listRV })
		if op.seen > op.listRV {
			rep.behindRevs = append(rep.behindRevs, op.seen-op.listRV)
		} else {
			rep.behindRevs = append(rep.behindRevs, 0)
		}
		if i < len(events) && !events[i].at.After(op.call) {
			rep.rv0Stale++
			rep.behindTime = append(rep.behindTime, op.call.Sub(events[i].at))
		} else {
			rep.behindTime = append(rep.behindTime, 0)
		}
	case linGet:
		// The version the read got began at r0: its resourceVersion, or for
		// an absent answer the latest deletion before the call (0: never
		// created; an older absence would be staler still, so this is a
		// lower bound). The read is behind from the key's first change
		// after r0 that etcd had before the call.
		r0 := op.rv
		var before []truthEvent
		for _, e := range perKey[op.key] {
			if e.at.After(op.call) {
				break
			}
			before = append(before, e)
			if op.rv == 0 && e.typ == watch.Deleted {
				r0 = e.rev
			}
		}
		i := sort.Search(len(before), func(i int) bool { return before[i].rev > r0 })
		if i == len(before) {
			rep.behindRevs = append(rep.behindRevs, 0)
			rep.behindTime = append(rep.behindTime, 0)
			return
		}
		rep.rv0Stale++
		rep.behindRevs = append(rep.behindRevs, before[len(before)-1].rev-r0)
		rep.behindTime = append(rep.behindTime, op.call.Sub(before[i].at))
	}
}

// linFailure is the report's failing part for the log.
func (r *linReport) failure() string { return strings.Join(r.failing, "\n") }
