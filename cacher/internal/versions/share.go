// Package versions makes two decoded versions of one object share the
// memory of every part they have equal, so the watch cache's history holds
// an updated object's unchanged parts once (see Share).
package versions

import (
	"maps"
	"reflect"
	"sync"
	"unsafe"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
)

// The history keeps an object's versions side by side: the one an event
// replaced (its prev) and the new one. Each arrives decoded on its own from
// etcd, so two versions of a pod that differ in a status field hold two
// full copies of its spec, metadata and managed fields: most of the heap a
// pod costs the cache after an update (docs/performance.md). Share
// points every part of the new version that equals the old one's at the
// old one's memory, and the new version's own copy goes to the collector.
//
// Cached objects are never written once the cache holds them (reads hand
// out shallow copies, and an update's hint is a deep copy, suggestion), so
// two versions sharing a part is invisible to clients: each still reads as
// it was decoded. A shared slice gets its length as capacity, so an append
// to it copies rather than writes past the end into the other version's.
//
// It runs on the reflector's goroutine for every event, so it walks the
// object through a plan per type (offsets and kinds, made once) rather
// than reflect.Value per field, which cost as much as decoding the object.

// Share makes cur use prev's memory for every part whose value is
// the same in both. cur must not be visible to anyone else yet; prev is
// only read. Objects of different types are left alone.
func Share(cur, prev runtime.Object) {
	if cur == nil || prev == nil {
		return
	}
	t := reflect.TypeOf(cur)
	if t != reflect.TypeOf(prev) || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return
	}
	c, p := reflect.ValueOf(cur).UnsafePointer(), reflect.ValueOf(prev).UnsafePointer()
	if c == nil || p == nil || c == p {
		return
	}
	planFor(t.Elem()).share(c, p)
}

// sharePlan is how to share a value of one type.
type sharePlan struct {
	typ  reflect.Type
	kind reflect.Kind
	size uintptr
	// flat: no pointers at all, so there is nothing to share, only to
	// compare. dense: flat and without padding, so equal bits are equal
	// values. A padded value's padding is not copied with it: a copy on
	// the stack (a map value's) may hold anything there.
	flat, dense bool
	// stringMap: a map whose keys and values are strings; quantityMap:
	// string keys, resource.Quantity values (requests and limits);
	// jsonMap: map[string]any, a custom resource's decoded JSON.
	stringMap, quantityMap, jsonMap bool
	fields                          []fieldPlan // struct
	elem                            *sharePlan  // pointer, slice, array, map's values
}

// fieldPlan is a field of a struct, or with plan nil a run of adjacent
// dense fields with no padding between them, compared as one block of
// size bytes.
type fieldPlan struct {
	offset, size uintptr
	plan         *sharePlan
}

var quantityType = reflect.TypeFor[resource.Quantity]()

var sharePlans sync.Map // reflect.Type -> *sharePlan

func planFor(t reflect.Type) *sharePlan {
	if p, ok := sharePlans.Load(t); ok {
		return p.(*sharePlan)
	}
	// Built under a lock so that a recursive type (a CRD schema's
	// properties) finds its own plan half made instead of looping.
	planMu.Lock()
	defer planMu.Unlock()
	building := map[reflect.Type]*sharePlan{}
	p := buildPlan(t, building)
	// Published once whole: a plan reachable from another must be done.
	for bt, bp := range building {
		sharePlans.Store(bt, bp)
	}
	return p
}

var planMu sync.Mutex

func buildPlan(t reflect.Type, building map[reflect.Type]*sharePlan) *sharePlan {
	if p, ok := sharePlans.Load(t); ok {
		return p.(*sharePlan)
	}
	if p, ok := building[t]; ok {
		return p
	}
	p := &sharePlan{typ: t, kind: t.Kind(), size: t.Size()}
	building[t] = p
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		p.flat, p.dense = true, true
	case reflect.Pointer, reflect.Slice:
		p.elem = buildPlan(t.Elem(), building)
	case reflect.Array:
		p.elem = buildPlan(t.Elem(), building)
		p.flat, p.dense = p.elem.flat, p.elem.dense
	case reflect.Map:
		p.elem = buildPlan(t.Elem(), building)
		p.stringMap = t.Key().Kind() == reflect.String && t.Elem().Kind() == reflect.String
		p.quantityMap = t.Key().Kind() == reflect.String && t.Elem() == quantityType
		p.jsonMap = t.Key().Kind() == reflect.String && t.Elem().Kind() == reflect.Interface && t.Elem().NumMethod() == 0
	case reflect.Struct:
		p.flat = true
		// Unexported fields too (a quantity's cached string): they are
		// written through unsafe, not reflect.
		for i := range t.NumField() {
			f := t.Field(i)
			fp := buildPlan(f.Type, building)
			p.flat = p.flat && fp.flat
			if !fp.dense {
				p.fields = append(p.fields, fieldPlan{offset: f.Offset, size: f.Type.Size(), plan: fp})
				continue
			}
			// Adjacent dense fields are compared as one block; padding
			// between two fields ends the block.
			if n := len(p.fields); n > 0 && p.fields[n-1].plan == nil && p.fields[n-1].offset+p.fields[n-1].size == f.Offset {
				p.fields[n-1].size += f.Type.Size()
				continue
			}
			p.fields = append(p.fields, fieldPlan{offset: f.Offset, size: f.Type.Size()})
		}
		p.dense = p.flat && (t.Size() == 0 ||
			len(p.fields) == 1 && p.fields[0].plan == nil && p.fields[0].offset == 0 && p.fields[0].size == t.Size())
	}
	return p
}

// sliceHeader is a slice's representation, typed so that writing it keeps
// the collector's write barrier.
type sliceHeader struct {
	data     unsafe.Pointer
	len, cap int
}

// share makes the value at n use the memory of the equal value at p where
// the two are equal, and reports whether they are equal throughout.
func (pl *sharePlan) share(n, p unsafe.Pointer) bool {
	if pl.flat {
		return pl.equalFlat(n, p)
	}
	switch pl.kind {
	case reflect.String:
		sn, sp := (*string)(n), (*string)(p)
		if *sn != *sp {
			return false
		}
		*sn = *sp
		return true
	case reflect.Pointer:
		pn, pp := *(*unsafe.Pointer)(n), *(*unsafe.Pointer)(p)
		if pn == nil || pp == nil || pn == pp {
			return pn == pp
		}
		if !pl.elem.share(pn, pp) {
			return false
		}
		*(*unsafe.Pointer)(n) = pp
		return true
	case reflect.Slice:
		hn, hp := (*sliceHeader)(n), (*sliceHeader)(p)
		if hn.len != hp.len || (hn.data == nil) != (hp.data == nil) {
			return false
		}
		if hn.len == 0 || hn.data == hp.data {
			return true
		}
		same := true
		if pl.elem.dense {
			same = equalBits(hn.data, hp.data, uintptr(hn.len)*pl.elem.size)
		} else {
			for i := range uintptr(hn.len) {
				if !pl.elem.share(unsafe.Add(hn.data, i*pl.elem.size), unsafe.Add(hp.data, i*pl.elem.size)) {
					same = false
				}
			}
		}
		if same {
			*hn = sliceHeader{data: hp.data, len: hp.len, cap: hp.len}
		}
		return same
	case reflect.Array:
		same := true
		for i := range uintptr(pl.typ.Len()) {
			if !pl.elem.share(unsafe.Add(n, i*pl.elem.size), unsafe.Add(p, i*pl.elem.size)) {
				same = false
			}
		}
		return same
	case reflect.Map:
		mn, mp := *(*unsafe.Pointer)(n), *(*unsafe.Pointer)(p)
		if mn == nil || mp == nil || mn == mp {
			return mn == mp
		}
		if pl.jsonMap {
			// The new version's own map, unpublished: its values can be
			// replaced by the old one's where equal.
			if !shareJSON(*(*map[string]any)(n), *(*map[string]any)(p)) {
				return false
			}
			*(*unsafe.Pointer)(n) = mp
			return true
		}
		// A map's values cannot be written in place: shared whole or not
		// at all.
		if !pl.equalMaps(n, p) {
			return false
		}
		*(*unsafe.Pointer)(n) = mp
		return true
	case reflect.Struct:
		same := true
		for _, f := range pl.fields {
			fn, fp := unsafe.Add(n, f.offset), unsafe.Add(p, f.offset)
			if f.plan == nil {
				same = same && equalBits(fn, fp, f.size)
			} else if !f.plan.share(fn, fp) {
				same = false
			}
		}
		return same
	default:
		// Interfaces (a RawExtension's Object): compared, never shared
		// into.
		return pl.deepEqual(n, p)
	}
}

// equalFlat compares two values without pointers, padding left out.
func (pl *sharePlan) equalFlat(n, p unsafe.Pointer) bool {
	switch {
	case pl.dense:
		return equalBits(n, p, pl.size)
	case pl.kind == reflect.Array:
		for i := range uintptr(pl.typ.Len()) {
			if !pl.elem.equalFlat(unsafe.Add(n, i*pl.elem.size), unsafe.Add(p, i*pl.elem.size)) {
				return false
			}
		}
		return true
	default: // a struct with padding
		for _, f := range pl.fields {
			fn, fp := unsafe.Add(n, f.offset), unsafe.Add(p, f.offset)
			if f.plan == nil && !equalBits(fn, fp, f.size) || f.plan != nil && !f.plan.equalFlat(fn, fp) {
				return false
			}
		}
		return true
	}
}

func (pl *sharePlan) equalMaps(n, p unsafe.Pointer) bool {
	if pl.stringMap {
		// Every map of string keys and values has the representation of
		// map[string]string, named types (labels.Set) included.
		return maps.Equal(*(*map[string]string)(n), *(*map[string]string)(p))
	}
	if pl.quantityMap {
		mn, mp := *(*map[string]resource.Quantity)(n), *(*map[string]resource.Quantity)(p)
		if len(mn) != len(mp) {
			return false
		}
		// On copies: what share writes into them is thrown away.
		var v, w resource.Quantity
		for k := range mn {
			var ok bool
			v = mn[k]
			if w, ok = mp[k]; !ok || !pl.elem.share(unsafe.Pointer(&v), unsafe.Pointer(&w)) {
				return false
			}
		}
		return true
	}
	// Other maps: each value compared through its plan, on copies, since
	// map values have no address.
	mn, mp := reflect.NewAt(pl.typ, n).Elem(), reflect.NewAt(pl.typ, p).Elem()
	if mn.Len() != mp.Len() {
		return false
	}
	vn, vp := reflect.New(pl.typ.Elem()).Elem(), reflect.New(pl.typ.Elem()).Elem()
	for it := mn.MapRange(); it.Next(); {
		found := mp.MapIndex(it.Key())
		if !found.IsValid() {
			return false
		}
		vn.SetIterValue(it)
		vp.Set(found)
		if !pl.elem.share(vn.Addr().UnsafePointer(), vp.Addr().UnsafePointer()) {
			return false
		}
	}
	return true
}

func (pl *sharePlan) deepEqual(n, p unsafe.Pointer) bool {
	return reflect.DeepEqual(reflect.NewAt(pl.typ, n).Elem().Interface(), reflect.NewAt(pl.typ, p).Elem().Interface())
}

func equalBits(n, p unsafe.Pointer, size uintptr) bool {
	if size == 0 || n == p {
		return true
	}
	return string(unsafe.Slice((*byte)(n), size)) == string(unsafe.Slice((*byte)(p), size))
}

// shareJSON shares what two decoded JSON values (unstructured objects:
// maps, slices, strings, numbers, booleans, nil) have equal, writing the
// old version's values into the new version's maps and slices, and reports
// whether the two are equal throughout (then the caller shares n whole).
func shareJSON(n, p any) bool {
	switch nv := n.(type) {
	case map[string]any:
		pv, ok := p.(map[string]any)
		if !ok || (nv == nil) != (pv == nil) {
			return false
		}
		same := len(nv) == len(pv)
		for k, x := range nv {
			y, ok := pv[k]
			if !ok {
				same = false
				continue
			}
			if shareJSON(x, y) {
				nv[k] = y
			} else {
				same = false
			}
		}
		return same
	case []any:
		pv, ok := p.([]any)
		if !ok || len(nv) != len(pv) || (nv == nil) != (pv == nil) {
			return false
		}
		same := true
		for i := range nv {
			if shareJSON(nv[i], pv[i]) {
				nv[i] = pv[i]
			} else {
				same = false
			}
		}
		return same
	case string:
		pv, ok := p.(string)
		return ok && nv == pv
	case nil:
		return p == nil
	default:
		// Numbers and booleans (int64, float64, bool): comparable.
		if reflect.TypeOf(n) != reflect.TypeOf(p) || !reflect.TypeOf(n).Comparable() {
			return false
		}
		return n == p
	}
}
