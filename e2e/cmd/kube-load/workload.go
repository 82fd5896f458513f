package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/watchkeeper/watchkeeper/internal/histogram"
)

// The workload: nodes in groups of nodesPerGroup, one namespace per group;
// in each namespace deploymentsPerNamespace deployments whose pods run on
// the group's nodes (a nodeSelector) and mount one of its two secrets and
// one of its two configmaps, so a node's pods mount 2 to 4 objects; a
// headless Service per deployment, so the endpointslice controller writes
// as pods come and go.
const (
	nodesPerGroup           = 10
	deploymentsPerNamespace = 4
	objectsPerKind          = 2
	groupLabel              = "kube-load.watchkeeper.io/group"
	appLabel                = "app"
)

type workload struct {
	client     kubernetes.Interface
	groups     int
	pods       int // the pods the deployments hold in total
	replicas   [][]int32
	namespaces []string
	mu         sync.Mutex
}

func nodeName(i int) string          { return fmt.Sprintf("kwok-node-%d", i) }
func groupOf(node int) int           { return node / nodesPerGroup }
func groupName(g int) string         { return "g" + strconv.Itoa(g) }
func namespaceName(g int) string     { return "load-" + strconv.Itoa(g) }
func deploymentName(d int) string    { return "app-" + strconv.Itoa(d) }
func secretName(i int) string        { return "app-secret-" + strconv.Itoa(i) }
func configMapName(i int) string     { return "app-config-" + strconv.Itoa(i) }
func stampNow() string               { return strconv.FormatInt(time.Now().UnixNano(), 10) }
func groupsFor(nodes int) int        { return (nodes + nodesPerGroup - 1) / nodesPerGroup }
func (w *workload) deployments() int { return w.groups * deploymentsPerNamespace }
func newWorkload(client kubernetes.Interface, nodes, pods int) *workload {
	w := &workload{client: client, groups: groupsFor(nodes), pods: pods}
	per := pods / w.deployments()
	extra := pods % w.deployments()
	for g := range w.groups {
		w.namespaces = append(w.namespaces, namespaceName(g))
		row := make([]int32, deploymentsPerNamespace)
		for d := range row {
			row[d] = int32(per)
			if g*deploymentsPerNamespace+d < extra {
				row[d]++
			}
		}
		w.replicas = append(w.replicas, row)
	}
	return w
}

// create makes the namespaces, their secrets, configmaps and services, and
// the deployments at their starting replicas.
func (w *workload) create(ctx context.Context) error {
	c := w.client
	for g, ns := range w.namespaces {
		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return err
		}
		for i := range objectsPerKind {
			meta := metav1.ObjectMeta{Name: secretName(i), Namespace: ns, Annotations: map[string]string{stampAnnotation: stampNow()}}
			if _, err := c.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: meta, StringData: map[string]string{"token": "s3cr3t"}}, metav1.CreateOptions{}); err != nil {
				return err
			}
			meta.Name = configMapName(i)
			if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"config": "v0"}}, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		// The ServiceAccount admission plugin refuses pods until the
		// namespace's default ServiceAccount exists.
		if err := waitFor(ctx, time.Minute, func() (bool, error) {
			_, err := c.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return err == nil, err
		}); err != nil {
			return fmt.Errorf("default ServiceAccount of %s: %w", ns, err)
		}
		for d := range deploymentsPerNamespace {
			if _, err := c.CoreV1().Services(ns).Create(ctx, service(ns, d), metav1.CreateOptions{}); err != nil {
				return err
			}
			if _, err := c.AppsV1().Deployments(ns).Create(ctx, deployment(ns, g, d, w.replicas[g][d]), metav1.CreateOptions{}); err != nil {
				return err
			}
		}
	}
	return nil
}

func service(ns string, d int) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: deploymentName(d), Namespace: ns},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  map[string]string{appLabel: deploymentName(d)},
			Ports:     []corev1.ServicePort{{Name: "http", Port: 80}},
		},
	}
}

func deployment(ns string, g, d int, replicas int32) *appsv1.Deployment {
	labels := map[string]string{appLabel: deploymentName(d)}
	obj := d % objectsPerKind
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: deploymentName(d), Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector:                  map[string]string{groupLabel: groupName(g)},
					AutomountServiceAccountToken:  ptr.To(false),
					EnableServiceLinks:            ptr.To(false),
					TerminationGracePeriodSeconds: ptr.To(int64(1)),
					Containers: []corev1.Container{{
						Name:  "app",
						Image: "registry.k8s.io/pause:3.10",
						Ports: []corev1.ContainerPort{{ContainerPort: 80, Name: "http"}},
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("1m"), corev1.ResourceMemory: resource.MustParse("1Mi"),
						}},
						VolumeMounts: []corev1.VolumeMount{
							{Name: "secret", MountPath: "/etc/secret"}, {Name: "config", MountPath: "/etc/config"},
						},
					}},
					Volumes: []corev1.Volume{
						{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secretName(obj)}}},
						{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: configMapName(obj)}}}},
					},
				},
			},
		},
	}
}

// churn moves pods between deployments at rate pods per second (that many
// created, as many deleted), in steps four times a second, until ctx ends.
// The total stays at w.pods.
func (w *workload) churn(ctx context.Context, rate float64, errs *atomic.Int64) {
	const steps = 4
	step := max(1, int32(rate/steps+0.5))
	every(ctx, time.Second/steps, func() {
		w.mu.Lock()
		// A pair of deployments, the one scaled down with step replicas
		// to give: a few picks find one (the total stays at w.pods).
		var ug, ud, dg, dd int
		for range 20 {
			ug, ud = rand.IntN(w.groups), rand.IntN(deploymentsPerNamespace)
			dg, dd = rand.IntN(w.groups), rand.IntN(deploymentsPerNamespace)
			if (ug != dg || ud != dd) && w.replicas[dg][dd] >= step {
				break
			}
		}
		if (ug == dg && ud == dd) || w.replicas[dg][dd] < step {
			w.mu.Unlock()
			return
		}
		w.replicas[ug][ud] += step
		w.replicas[dg][dd] -= step
		up, down := w.replicas[ug][ud], w.replicas[dg][dd]
		w.mu.Unlock()
		if err := w.scale(ctx, ug, ud, up); err != nil && ctx.Err() == nil {
			errs.Add(1)
		}
		if err := w.scale(ctx, dg, dd, down); err != nil && ctx.Err() == nil {
			errs.Add(1)
		}
	})
}

// every calls f every period until ctx ends.
func every(ctx context.Context, period time.Duration, f func()) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		f()
	}
}

func (w *workload) scale(ctx context.Context, g, d int, replicas int32) error {
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	_, err := w.client.AppsV1().Deployments(namespaceName(g)).Patch(ctx, deploymentName(d), types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// stampObjects updates the namespaces' secrets and configmaps in turn,
// rate a second, each with a fresh stamp: every kubelet whose pods mount
// one gets the event.
func (w *workload) stampObjects(ctx context.Context, rate float64, writes, errs *atomic.Int64) {
	if rate <= 0 {
		return
	}
	i := -1
	every(ctx, time.Duration(float64(time.Second)/rate), func() {
		i++
		n := i % (w.groups * objectsPerKind * 2)
		ns := namespaceName(n / (objectsPerKind * 2))
		k := n % (objectsPerKind * 2)
		patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, stampAnnotation, stampNow()))
		var err error
		if k < objectsPerKind {
			_, err = w.client.CoreV1().Secrets(ns).Patch(ctx, secretName(k), types.MergePatchType, patch, metav1.PatchOptions{})
		} else {
			_, err = w.client.CoreV1().ConfigMaps(ns).Patch(ctx, configMapName(k-objectsPerKind), types.MergePatchType, patch, metav1.PatchOptions{})
		}
		if err != nil {
			if ctx.Err() == nil {
				errs.Add(1)
			}
			return
		}
		writes.Add(1)
	})
}

// stampPods patches a random Running pod's annotation with a fresh stamp,
// rate a second: the pod's kubelet gets the event on its WatchList.
func stampPods(ctx context.Context, client kubernetes.Interface, t *podTracker, rate float64, writes, errs *atomic.Int64) {
	if rate <= 0 {
		return
	}
	every(ctx, time.Duration(float64(time.Second)/rate), func() {
		ns, name, ok := t.randomRunning()
		if !ok {
			return
		}
		patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, stampAnnotation, stampNow()))
		_, err := client.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		switch {
		case err == nil:
			writes.Add(1)
		case apierrors.IsNotFound(err), ctx.Err() != nil:
			// deleted by the churn meanwhile, or the run is over
		default:
			errs.Add(1)
		}
	})
}

// podTracker is the driver's informer of every pod: it measures pod
// startup (first seen to first seen Running, on the same watch) and knows
// the Running pods.
type podTracker struct {
	st      *stats
	mu      sync.Mutex
	first   map[types.UID]time.Time
	running map[string]bool // ns/name
	keys    []string        // running's keys, for a random pick
	startup histogram.Histogram
	created atomic.Int64 // pods first seen while measuring
}

func newPodTracker(st *stats) *podTracker {
	return &podTracker{st: st, first: map[types.UID]time.Time{}, running: map[string]bool{}}
}

func (t *podTracker) run(ctx context.Context, client kubernetes.Interface, wg *sync.WaitGroup) {
	lw := newCountingLW(cache.ToListerWatcherWithContext(cache.NewListWatchFromClient(client.CoreV1().RESTClient(), "pods", "", fields.Everything())),
		t.st, classDriver, nil)
	r := cache.NewReflectorWithOptions(lw, &corev1.Pod{}, t, cache.ReflectorOptions{Name: "driver/pods"})
	wg.Go(func() { r.RunWithContext(ctx) })
}

func (t *podTracker) runningCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.running)
}

func (t *podTracker) randomRunning() (string, string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for range 10 {
		if len(t.keys) == 0 {
			return "", "", false
		}
		i := rand.IntN(len(t.keys))
		key := t.keys[i]
		if !t.running[key] { // compact lazily
			t.keys[i] = t.keys[len(t.keys)-1]
			t.keys = t.keys[:len(t.keys)-1]
			continue
		}
		ns, name, _ := cache.SplitMetaNamespaceKey(key)
		return ns, name, true
	}
	return "", "", false
}

func (t *podTracker) see(p *corev1.Pod, live bool) {
	now := time.Now()
	key := p.Namespace + "/" + p.Name
	t.mu.Lock()
	defer t.mu.Unlock()
	first, seen := t.first[p.UID]
	if !seen {
		first = now
		t.first[p.UID] = now
		if live && t.st.now() != phaseRamp {
			t.created.Add(1)
		}
	}
	isRunning := p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil
	if isRunning && !t.running[key] {
		t.running[key] = true
		t.keys = append(t.keys, key)
		// Only pods this watch saw created and then Running: a pod that
		// was Running when first seen (an initial list) has no startup here.
		if live && seen && t.st.now() != phaseRamp {
			t.startup.Record(now.Sub(first))
		}
	} else if !isRunning && t.running[key] {
		delete(t.running, key)
	}
}

func (t *podTracker) forget(p *corev1.Pod) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.running, p.Namespace+"/"+p.Name)
	delete(t.first, p.UID)
}

func (t *podTracker) Add(obj any) error    { t.see(obj.(*corev1.Pod), true); return nil }
func (t *podTracker) Update(obj any) error { t.see(obj.(*corev1.Pod), true); return nil }
func (t *podTracker) Delete(obj any) error {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	t.forget(obj.(*corev1.Pod))
	return nil
}

func (t *podTracker) Replace(items []any, _ string) error {
	t.mu.Lock()
	t.running = map[string]bool{}
	t.keys = nil
	t.mu.Unlock()
	for _, it := range items {
		t.see(it.(*corev1.Pod), false)
	}
	return nil
}

func (t *podTracker) Resync() error { return nil }

// waitFor polls cond every 250ms until it is true, fails, or timeout.
func waitFor(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not done after %v", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
