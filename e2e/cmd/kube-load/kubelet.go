package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// A kubelet's API traffic, as the kubelet of v1.37 makes it: its own
// client (node identity, QPS 50, burst 100, protobuf), a WatchList of the
// pods bound to it, a watch of its Node, one watch per secret and configmap
// its pods mount (the kubelet's watch-based manager: fieldSelector
// metadata.name), its Lease renewed every 10s, its Node's status patched
// every minute. kwok writes the pods' status and deletes them, as the rest
// of a kubelet would; it leaves the leases and node status to us.
const (
	kubeletQPS            = 50
	kubeletBurst          = 100
	leaseDuration         = 40 * time.Second
	leaseRenewInterval    = 10 * time.Second
	nodeStatusInterval    = time.Minute
	leaseRenewJitter      = 0.04
	kubeletProtobufAccept = "application/vnd.kubernetes.protobuf,application/json"
)

type kubelet struct {
	name   string
	client kubernetes.Interface
	st     *stats

	// ctx is run's: every goroutine of the kubelet ends with it.
	ctx context.Context

	mu sync.Mutex
	// The watches the start storm restarts: a generation of them shares
	// one context, a child of ctx.
	gen         int
	watchCtx    context.Context
	watchCancel context.CancelFunc
	pods        map[string]podView // key -> what the kubelet knows of it
	refs        map[objectRef]int  // secret or configmap -> pods that mount it
	objWatches  map[objectRef]context.CancelFunc
	podsSynced  time.Time // the latest completed WatchList of pods
	// podsRV is the resourceVersion the pods' reflector of this
	// generation synced to (its list, then every event and bookmark):
	// the pods hold everything at or below it.
	podsRV  string
	watchOK time.Time // the latest successful watch call of pods
	lease   *coordinationv1.Lease
	wg      sync.WaitGroup
}

type podView struct {
	rv   string
	refs []objectRef
}

type objectRef struct {
	kind      string // secrets, configmaps
	namespace string
	name      string
}

func newKubelet(base *rest.Config, name string, cert, key []byte, st *stats) (*kubelet, error) {
	cfg := rest.CopyConfig(base)
	cfg.TLSClientConfig.CertData, cfg.TLSClientConfig.KeyData = cert, key
	cfg.TLSClientConfig.CertFile, cfg.TLSClientConfig.KeyFile = "", ""
	cfg.QPS, cfg.Burst = kubeletQPS, kubeletBurst
	cfg.UserAgent = "kube-load-kubelet/" + name
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = kubeletProtobufAccept
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &kubelet{name: name, client: client, st: st}, nil
}

// run starts the kubelet's loops; they stop with ctx.
func (k *kubelet) run(ctx context.Context) {
	k.ctx = ctx
	k.restartWatches()
	k.wg.Go(func() { k.leaseLoop(ctx) })
	k.wg.Go(func() { k.nodeStatusLoop(ctx) })
}

// wait waits for every goroutine of the kubelet, after run's ctx ended.
func (k *kubelet) wait() { k.wg.Wait() }

// restartWatches stops the kubelet's watches, if any, and starts them
// anew, as a restarted kubelet does: a WatchList of its pods from scratch.
// The new watches end with run's context, like the first ones.
func (k *kubelet) restartWatches() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.watchCancel != nil {
		k.watchCancel()
	}
	k.gen++
	gen := k.gen
	k.watchCtx, k.watchCancel = context.WithCancel(k.ctx)
	k.pods = map[string]podView{}
	k.podsRV = ""
	k.refs = map[objectRef]int{}
	k.objWatches = map[objectRef]context.CancelFunc{}
	wctx := k.watchCtx

	podLW := newCountingLW(k.listWatch("pods", "", fields.OneTermEqualSelector("spec.nodeName", k.name)),
		k.st, classPods, &k.st.podLatency)
	podLW.onSynced = func(at time.Time, _ bool) {
		k.mu.Lock()
		if k.gen == gen {
			k.podsSynced = at
		}
		k.mu.Unlock()
	}
	podLW.onWatch = func(at time.Time) {
		k.mu.Lock()
		if k.gen == gen {
			k.watchOK = at
		}
		k.mu.Unlock()
	}
	k.runReflector(wctx, podLW, &corev1.Pod{}, &podStore{k: k, gen: gen}, "pods")

	nodeLW := newCountingLW(k.listWatch("nodes", "", fields.OneTermEqualSelector("metadata.name", k.name)),
		k.st, classNode, nil)
	k.runReflector(wctx, nodeLW, &corev1.Node{}, cache.NewStore(cache.MetaNamespaceKeyFunc), "node")
}

func (k *kubelet) listWatch(resource, namespace string, selector fields.Selector) cache.ListerWatcherWithContext {
	lw := cache.NewListWatchFromClient(k.client.CoreV1().RESTClient(), resource, namespace, selector)
	return cache.ToListerWatcherWithContext(lw)
}

func (k *kubelet) runReflector(ctx context.Context, lw *countingLW, obj runtime.Object, store cache.ReflectorStore, what string) {
	r := cache.NewReflectorWithOptions(lw, obj, store, cache.ReflectorOptions{Name: k.name + "/" + what})
	k.wg.Go(func() { r.RunWithContext(ctx) })
}

// setPod records a pod the WatchList delivered (nil: deleted) and starts or
// stops the watches of the objects its pods mount.
func (k *kubelet) setPod(gen int, key string, pod *corev1.Pod) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if gen != k.gen {
		return // a stopped generation's late event
	}
	k.setPodLocked(key, pod)
}

func (k *kubelet) setPodLocked(key string, pod *corev1.Pod) {
	old, had := k.pods[key]
	var refs []objectRef
	if pod != nil {
		refs = podRefs(pod)
		k.pods[key] = podView{rv: pod.ResourceVersion, refs: refs}
	} else {
		delete(k.pods, key)
	}
	for _, r := range refs {
		k.refs[r]++
		if k.refs[r] == 1 {
			k.startObjectWatch(r)
		}
	}
	if had {
		for _, r := range old.refs {
			k.refs[r]--
			if k.refs[r] == 0 {
				delete(k.refs, r)
				if cancel := k.objWatches[r]; cancel != nil {
					cancel()
					delete(k.objWatches, r)
				}
			}
		}
	}
}

// replacePods is a completed WatchList at rv: the pods are exactly these.
// It is applied whole under the lock, so a view never sees half of it.
func (k *kubelet) replacePods(gen int, pods []*corev1.Pod, rv string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if gen != k.gen {
		return
	}
	seen := map[string]bool{}
	for _, p := range pods {
		seen[p.Namespace+"/"+p.Name] = true
	}
	var gone []string
	for key := range k.pods {
		if !seen[key] {
			gone = append(gone, key)
		}
	}
	// The pods first, then the gone ones: a secret both mount keeps its
	// watch.
	for _, p := range pods {
		k.setPodLocked(p.Namespace+"/"+p.Name, p)
	}
	for _, key := range gone {
		k.setPodLocked(key, nil)
	}
	k.podsRV = rv
}

// podsSyncedTo records that the pods' reflector synced to rv: an event
// or bookmark applied.
func (k *kubelet) podsSyncedTo(gen int, rv string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if gen == k.gen {
		k.podsRV = rv
	}
}

// startObjectWatch watches one secret or configmap, by name. Called with
// k.mu held.
func (k *kubelet) startObjectWatch(r objectRef) {
	ctx, cancel := context.WithCancel(k.watchCtx)
	k.objWatches[r] = cancel
	lw := newCountingLW(k.listWatch(r.kind, r.namespace, fields.OneTermEqualSelector("metadata.name", r.name)),
		k.st, classObjects, &k.st.objectLatency)
	var obj runtime.Object = &corev1.Secret{}
	if r.kind == "configmaps" {
		obj = &corev1.ConfigMap{}
	}
	k.runReflector(ctx, lw, obj, cache.NewStore(cache.MetaNamespaceKeyFunc), r.kind+"/"+r.name)
}

// podRefs are the secrets and configmaps a pod mounts.
func podRefs(p *corev1.Pod) []objectRef {
	var out []objectRef
	for _, v := range p.Spec.Volumes {
		switch {
		case v.Secret != nil:
			out = append(out, objectRef{"secrets", p.Namespace, v.Secret.SecretName})
		case v.ConfigMap != nil:
			out = append(out, objectRef{"configmaps", p.Namespace, v.ConfigMap.Name})
		}
	}
	return out
}

// syncTimes are when the kubelet's current WatchList of pods synced and
// when its latest watch call of pods succeeded.
func (k *kubelet) syncTimes() (podsSynced, watchOK time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.podsSynced, k.watchOK
}

// podsView is the kubelet's pods, key -> resourceVersion, and the RV its
// reflector synced to, read together.
func (k *kubelet) podsView() (kubeletView, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	v := kubeletView{pods: make(map[string]uint64, len(k.pods))}
	var err error
	if v.progress, err = parseRV(k.podsRV); err != nil {
		return v, fmt.Errorf("%s: synced to %w", k.name, err)
	}
	for key, p := range k.pods {
		if v.pods[key], err = parseRV(p.rv); err != nil {
			return v, fmt.Errorf("%s: %s: %w", k.name, key, err)
		}
	}
	return v, nil
}

// leaseLoop renews the node's Lease every 10s (jittered), as the kubelet's
// lease controller does: an update of the lease it holds, a get (and a
// create if missing) when it has none or the update failed.
func (k *kubelet) leaseLoop(ctx context.Context) {
	leases := k.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	for {
		k.renewLease(ctx, leases)
		d := time.Duration(float64(leaseRenewInterval) * (1 + leaseRenewJitter*rand.Float64()))
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

func (k *kubelet) renewLease(ctx context.Context, leases interface {
	Get(context.Context, string, metav1.GetOptions) (*coordinationv1.Lease, error)
	Create(context.Context, *coordinationv1.Lease, metav1.CreateOptions) (*coordinationv1.Lease, error)
	Update(context.Context, *coordinationv1.Lease, metav1.UpdateOptions) (*coordinationv1.Lease, error)
}) {
	now := metav1.NewMicroTime(time.Now())
	if k.lease != nil {
		l := k.lease.DeepCopy()
		l.Spec.RenewTime = &now
		if updated, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err == nil {
			k.lease = updated
			return
		}
		k.lease = nil
	}
	l, err := leases.Get(ctx, k.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: k.name, Namespace: corev1.NamespaceNodeLease},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(k.name),
				LeaseDurationSeconds: ptr.To(int32(leaseDuration / time.Second)),
				RenewTime:            &now,
			},
		}, metav1.CreateOptions{})
		if err == nil {
			k.lease = l
		}
		return
	}
	if err != nil {
		return
	}
	l.Spec.RenewTime = &now
	if updated, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err == nil {
		k.lease = updated
	}
}

// nodeStatusLoop patches the node's status every minute, as the kubelet's
// status report does: a get of the node (resourceVersion 0, from the
// cache), then a strategic-merge patch of its conditions' heartbeats.
func (k *kubelet) nodeStatusLoop(ctx context.Context) {
	// Spread the first report over the interval, as kubelets started at
	// different times would.
	first := time.Duration(rand.Int64N(int64(nodeStatusInterval)))
	select {
	case <-ctx.Done():
		return
	case <-time.After(first):
	}
	for {
		k.reportStatus(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(nodeStatusInterval):
		}
	}
}

func (k *kubelet) reportStatus(ctx context.Context) {
	nodes := k.client.CoreV1().Nodes()
	node, err := nodes.Get(ctx, k.name, metav1.GetOptions{ResourceVersion: "0"})
	if err != nil {
		return
	}
	now := time.Now().UTC().Format(time.RFC3339)
	var conds []string
	for _, c := range node.Status.Conditions {
		conds = append(conds, fmt.Sprintf(`{"type":%q,"lastHeartbeatTime":%q}`, c.Type, now))
	}
	if len(conds) == 0 {
		return // kwok has not initialized it yet
	}
	patch := `{"status":{"conditions":[` + strings.Join(conds, ",") + `]}}`
	_, _ = nodes.Patch(ctx, k.name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
}

// podStore is the reflector's store of a kubelet's pods.
var _ cache.ResourceVersionUpdater = (*podStore)(nil)

type podStore struct {
	k   *kubelet
	gen int
}

func (s *podStore) Add(obj any) error {
	p := obj.(*corev1.Pod)
	s.k.setPod(s.gen, p.Namespace+"/"+p.Name, p)
	return nil
}

func (s *podStore) Update(obj any) error { return s.Add(obj) }

func (s *podStore) Delete(obj any) error {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p := obj.(*corev1.Pod)
	s.k.setPod(s.gen, p.Namespace+"/"+p.Name, nil)
	return nil
}

func (s *podStore) Replace(items []any, rv string) error {
	pods := make([]*corev1.Pod, 0, len(items))
	for _, it := range items {
		pods = append(pods, it.(*corev1.Pod))
	}
	s.k.replacePods(s.gen, pods, rv)
	return nil
}

// UpdateResourceVersion is the reflector's word (cache.ResourceVersionUpdater)
// that it synced to rv: called after each event and bookmark it applied
// once past the initial events.
func (s *podStore) UpdateResourceVersion(rv string) { s.k.podsSyncedTo(s.gen, rv) }

func (s *podStore) Resync() error { return nil }
