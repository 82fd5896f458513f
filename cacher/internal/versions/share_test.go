package versions

import (
	"bytes"
	"reflect"
	"strconv"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/randfill"

	"github.com/watchkeeper/watchkeeper/internal/aliasing"
	"github.com/watchkeeper/watchkeeper/internal/fixtures"
)

// decodedPod is pod as the cache gets it from etcd: decoded on its own,
// sharing no memory with any other object.
func decodedPod(t testing.TB, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	data, err := runtime.Encode(fixtures.CorePodCodec, pod)
	if err != nil {
		t.Fatal(err)
	}
	out, err := runtime.Decode(fixtures.CorePodCodec, data)
	if err != nil {
		t.Fatal(err)
	}
	return out.(*corev1.Pod)
}

func TestShareVersionSharesWhatDidNotChange(t *testing.T) {
	prev := decodedPod(t, fixtures.RealisticPod("p", "ns", 3, 0))
	// A kubelet status update: new container IDs, start times, restart
	// counts; and a label that changed.
	next := fixtures.RealisticPod("p", "ns", 3, 1)
	next.Labels["tier"] = "changed"
	cur := decodedPod(t, next)
	prevBefore, curBefore := prev.DeepCopy(), cur.DeepCopy()

	Share(cur, prev)

	if !reflect.DeepEqual(cur, curBefore) {
		t.Fatal("sharing changed the new version's value")
	}
	if !reflect.DeepEqual(prev, prevBefore) {
		t.Fatal("sharing changed the old version")
	}
	// Unchanged parts are the old version's memory.
	for what, shared := range map[string]bool{
		"spec.containers":          aliasing.Slice(cur.Spec.Containers, prev.Spec.Containers),
		"spec.initContainers":      aliasing.Slice(cur.Spec.InitContainers, prev.Spec.InitContainers),
		"spec.volumes":             aliasing.Slice(cur.Spec.Volumes, prev.Spec.Volumes),
		"spec.tolerations":         aliasing.Slice(cur.Spec.Tolerations, prev.Spec.Tolerations),
		"spec.securityContext":     cur.Spec.SecurityContext == prev.Spec.SecurityContext,
		"spec.nodeName":            aliasing.String(cur.Spec.NodeName, prev.Spec.NodeName),
		"metadata.annotations":     aliasing.Map(cur.Annotations, prev.Annotations),
		"metadata.ownerReferences": aliasing.Slice(cur.OwnerReferences, prev.OwnerReferences),
		"metadata.name":            aliasing.String(cur.Name, prev.Name),
		"status.conditions[0]":     cur.Status.Conditions[0].Type == prev.Status.Conditions[0].Type && aliasing.String(string(cur.Status.Conditions[0].Type), string(prev.Status.Conditions[0].Type)),
		"status.hostIPs":           aliasing.Slice(cur.Status.HostIPs, prev.Status.HostIPs),
	} {
		if !shared {
			t.Errorf("%s: unchanged, but not shared with the old version", what)
		}
	}
	// Changed parts are not: the labels (one value differs, and a map is
	// shared whole or not at all), the container statuses (new IDs), and
	// the conditions (a start time moved).
	for what, shared := range map[string]bool{
		"metadata.labels":          aliasing.Map(cur.Labels, prev.Labels),
		"status.containerStatuses": aliasing.Slice(cur.Status.ContainerStatuses, prev.Status.ContainerStatuses),
		"status.conditions":        aliasing.Slice(cur.Status.Conditions, prev.Status.Conditions),
	} {
		if shared {
			t.Errorf("%s: changed, but shared with the old version", what)
		}
	}
}

func TestShareVersionKeepsNilApartFromEmpty(t *testing.T) {
	prev := &corev1.Pod{Spec: corev1.PodSpec{Containers: nil, NodeSelector: nil}, ObjectMeta: metav1.ObjectMeta{Finalizers: []string{}}}
	cur := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{}, NodeSelector: map[string]string{}}}
	// Inside a part that is otherwise equal: it must not be shared.
	prev.Spec.SecurityContext = &corev1.PodSecurityContext{SupplementalGroups: nil, Sysctls: []corev1.Sysctl{}}
	cur.Spec.SecurityContext = &corev1.PodSecurityContext{SupplementalGroups: []int64{}, Sysctls: []corev1.Sysctl{}}
	Share(cur, prev)
	if cur.Spec.Containers == nil || cur.Spec.NodeSelector == nil || cur.Spec.SecurityContext.SupplementalGroups == nil {
		t.Error("an empty slice or map became nil")
	}
	if cur.Finalizers != nil {
		t.Error("a nil slice became empty")
	}
}

func TestShareVersionSharesQuantityMapsWholeWhenEqual(t *testing.T) {
	// Quantities have unexported fields: compared, the map holding them
	// shared whole when equal.
	limits := func(cpu string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("1Gi")}
	}
	prev := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
		{Name: "a", Resources: corev1.ResourceRequirements{Limits: limits("1")}},
		{Name: "b", Resources: corev1.ResourceRequirements{Limits: limits("1")}},
	}}}
	cur := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
		{Name: "a", Resources: corev1.ResourceRequirements{Limits: limits("1")}},
		{Name: "b", Resources: corev1.ResourceRequirements{Limits: limits("2")}},
	}}}
	Share(cur, prev)
	if !aliasing.Map(cur.Spec.Containers[0].Resources.Limits, prev.Spec.Containers[0].Resources.Limits) {
		t.Error("equal limits not shared")
	}
	if aliasing.Map(cur.Spec.Containers[1].Resources.Limits, prev.Spec.Containers[1].Resources.Limits) {
		t.Error("different limits shared")
	}
	if q := cur.Spec.Containers[1].Resources.Limits[corev1.ResourceCPU]; q.String() != "2" {
		t.Errorf("cpu limit %s, want 2", q.String())
	}
	if aliasing.Slice(cur.Spec.Containers, prev.Spec.Containers) {
		t.Error("containers shared whole though one differs")
	}
	if !aliasing.String(cur.Spec.Containers[1].Name, prev.Spec.Containers[1].Name) {
		t.Error("the differing container's unchanged name not shared")
	}
}

func TestShareVersionLeavesOtherTypesAlone(t *testing.T) {
	cur := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x"}}
	Share(cur, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}})
	Share(cur, nil)
	Share(cur, (*corev1.Pod)(nil))
	if cur.Name != "x" {
		t.Fatal("changed")
	}
}

// BenchmarkShareVersion is the cost per event the reflector pays for a
// realistic pod's status update.
func BenchmarkShareVersion(b *testing.B) {
	prev := decodedPod(b, fixtures.RealisticPod("p", "ns", 3, 0))
	curs := make([]*corev1.Pod, b.N)
	for i := range curs {
		curs[i] = decodedPod(b, fixtures.RealisticPod("p", "ns", 3, 1))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		Share(curs[i], prev)
	}
}

// BenchmarkShareVersionWarm shares versions decoded just before, in
// batches small enough to stay in the CPU's caches, as the reflector gets
// them from etcd's watch.
func BenchmarkShareVersionWarm(b *testing.B) {
	prev := decodedPod(b, fixtures.RealisticPod("p", "ns", 3, 0))
	data, _ := runtime.Encode(fixtures.CorePodCodec, fixtures.RealisticPod("p", "ns", 3, 1))
	batch := make([]runtime.Object, 16)
	b.ReportAllocs()
	for i := 0; i < b.N; i += len(batch) {
		b.StopTimer()
		for j := range batch {
			batch[j], _ = runtime.Decode(fixtures.CorePodCodec, data)
		}
		b.StartTimer()
		for j := range batch {
			Share(batch[j], prev)
		}
	}
}

// Random pods, and random changes to them: whatever the two versions hold,
// sharing leaves each reading as it did, and a part changed in one is
// never shared.
func TestShareVersionKeepsRandomVersionsAsTheyWere(t *testing.T) {
	f := randfill.NewWithSeed(7).NilChance(0.2).NumElements(0, 3).Funcs(
		// Quantities and times as the decoder makes them: a parsed
		// value, a time in the local zone without monotonic reading.
		func(q *resource.Quantity, c randfill.Continue) {
			*q = *resource.NewMilliQuantity(c.Int63n(1e6), resource.DecimalSI)
		},
		func(tm *metav1.Time, c randfill.Continue) {
			*tm = metav1.Unix(c.Int63n(1e9), 0)
		},
	)
	for i := range 300 {
		prev := &corev1.Pod{}
		f.Fill(prev)
		cur := prev.DeepCopy()
		// Refill one part of the copy: a field of the spec, the status or
		// the metadata, picked at random.
		switch i % 4 {
		case 0:
			f.Fill(&cur.Spec.Containers)
		case 1:
			f.Fill(&cur.Status.Conditions)
		case 2:
			f.Fill(&cur.Labels)
		case 3:
			// Bytes of the same length that differ in one.
			for _, m := range cur.ManagedFields {
				if raw := bytes.Clone(m.FieldsV1.GetRawBytes()); len(raw) > 0 {
					raw[0] ^= 1
					m.FieldsV1.SetRawBytes(raw)
				}
			}
		}
		prevBefore, curBefore := prev.DeepCopy(), cur.DeepCopy()
		Share(cur, prev)
		if !reflect.DeepEqual(cur, curBefore) {
			t.Fatalf("pod %d: the new version changed", i)
		}
		if !reflect.DeepEqual(prev, prevBefore) {
			t.Fatalf("pod %d: the old version changed", i)
		}
		// Writing into the new version's own parts leaves the old one
		// alone: what is not shared is not aliased.
		if len(cur.Status.Conditions) > 0 && !aliasing.Slice(cur.Status.Conditions, prev.Status.Conditions) {
			cur.Status.Conditions[0].Reason = "written"
			if !reflect.DeepEqual(prev, prevBefore) {
				t.Fatalf("pod %d: writing the new version's conditions changed the old one", i)
			}
		}
	}
}

// A custom resource's object is decoded JSON: the parts of it that did not
// change are shared too, each map and slice at the deepest level where
// the versions agree.
func TestShareVersionSharesUnstructuredParts(t *testing.T) {
	obj := func(replicas int64, phase string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "demo.example.com/v1", "kind": "Widget",
			"metadata": map[string]any{"name": "w", "resourceVersion": strconv.FormatInt(replicas, 10), "labels": map[string]any{"app": "x"}},
			"spec":     map[string]any{"replicas": replicas, "template": map[string]any{"ports": []any{int64(80), "http", 1.5, true, nil}}},
			"status":   map[string]any{"phase": phase},
		}}
	}
	prev, cur := obj(1, "Pending"), obj(2, "Pending")
	want := obj(2, "Pending")
	Share(cur, prev)
	if !reflect.DeepEqual(cur, want) || !reflect.DeepEqual(prev, obj(1, "Pending")) {
		t.Fatalf("values changed: new %v, old %v", cur.Object, prev.Object)
	}
	nested := func(u *unstructured.Unstructured, path ...string) map[string]any {
		v := u.Object
		for _, k := range path {
			v = v[k].(map[string]any)
		}
		return v
	}
	for what, shared := range map[string]bool{
		"status":          aliasing.Map(nested(cur, "status"), nested(prev, "status")),
		"metadata.labels": aliasing.Map(nested(cur, "metadata", "labels"), nested(prev, "metadata", "labels")),
		"spec.template":   aliasing.Map(nested(cur, "spec", "template"), nested(prev, "spec", "template")),
	} {
		if !shared {
			t.Errorf("%s: unchanged, not shared", what)
		}
	}
	for what, shared := range map[string]bool{
		"metadata": aliasing.Map(nested(cur, "metadata"), nested(prev, "metadata")),
		"spec":     aliasing.Map(nested(cur, "spec"), nested(prev, "spec")),
	} {
		if shared {
			t.Errorf("%s: changed, but shared", what)
		}
	}
}

// padded has 4 bytes of padding after A, and its array 4 after each B.
type padded struct {
	A int32
	B int64
	C [2]struct {
		B int64
		D int32
	}
}

type holdsPadded struct {
	Ptr   *padded
	Slice []padded
	Name  string
}

// A copy of a value need not carry its padding (a map value's copy on the
// stack may hold anything there): equal values with different padding are
// equal, and shared. The race detector's builds showed it, one run in
// fifteen, on quantities' maps.
func TestShareVersionIgnoresPadding(t *testing.T) {
	dirty := func(v *padded) {
		b := unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
		for _, pad := range []uintptr{unsafe.Offsetof(v.A) + 4, unsafe.Offsetof(v.C) + 12, unsafe.Offsetof(v.C) + 16 + 12} {
			for i := range uintptr(4) {
				b[pad+i] = 0xff
			}
		}
	}
	value := padded{A: 1, B: 2}
	value.C[1].D = 3
	prev := &holdsPadded{Ptr: &padded{}, Slice: make([]padded, 2), Name: "x"}
	*prev.Ptr, prev.Slice[0], prev.Slice[1] = value, value, value
	cur := &holdsPadded{Ptr: &padded{}, Slice: make([]padded, 2), Name: "x"}
	*cur.Ptr, cur.Slice[0], cur.Slice[1] = value, value, value
	dirty(cur.Ptr)
	dirty(&cur.Slice[1])

	if !planFor(reflect.TypeFor[holdsPadded]()).share(unsafe.Pointer(cur), unsafe.Pointer(prev)) {
		t.Error("equal values with different padding reported unequal")
	}
	if cur.Ptr != prev.Ptr {
		t.Error("an equal pointed-to value with different padding not shared")
	}
	if !aliasing.Slice(cur.Slice, prev.Slice) {
		t.Error("an equal slice with different padding not shared")
	}
}
