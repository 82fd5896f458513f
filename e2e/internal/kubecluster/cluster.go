package kubecluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Cluster is a kube-apiserver (with one cache) and what makes it a cluster:
// kube-controller-manager, kube-scheduler, and kwok's simulated nodes, on
// which pods reach Running.
type Cluster struct {
	*Server
	Controllers []*Child
}

// ClusterConfig says which binaries make the cluster and how they run.
type ClusterConfig struct {
	KubeAPIServer, ControllerManager, Scheduler, Kwok string
	// KwokStagesDir is kwok's kustomize/stage directory in its module;
	// KwokStages the files of it the cluster runs.
	KwokStagesDir string
	KwokStages    []string
	// KwokNodeLeaseSeconds > 0 has kwok hold and renew each node's Lease;
	// 0 leaves the leases to someone else (kwok then manages every node it
	// selects, lease or not).
	KwokNodeLeaseSeconds int
	// More flags for each.
	ServerArgs, ControllerManagerArgs, SchedulerArgs []string
}

// FastKwokStages are kwokctl's default "fast" set: nodes initialized at once
// and kept alive by their leases, pods Ready at once, completed and deleted
// as a kubelet would.
var FastKwokStages = []string{
	"node/fast/node-initialize.yaml",
	"node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
	"pod/fast/pod-ready.yaml",
	"pod/fast/pod-complete.yaml",
	"pod/fast/pod-delete.yaml",
}

// StartCluster starts a server named name with the cache decorator, then
// kube-controller-manager, kube-scheduler and kwok, each with a kubeconfig
// of its own identity. It adds no nodes (AddNodes does).
func StartCluster(ctx context.Context, runDir string, pki *PKI, cc ClusterConfig, name, decorator string) (*Cluster, error) {
	s, err := StartServer(ctx, runDir, pki, ServerConfig{Name: name, Binary: cc.KubeAPIServer, Decorator: decorator, Args: cc.ServerArgs})
	if err != nil {
		return nil, err
	}
	c := &Cluster{Server: s}
	if err := c.startControllers(runDir, pki, cc); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) startControllers(runDir string, pki *PKI, cc ClusterConfig) error {
	kubeconfig := func(user, file string) (string, error) {
		path := filepath.Join(runDir, c.Name+"-"+file+".kubeconfig")
		return path, pki.WriteCertKubeconfig(path, c.URL, user, file)
	}
	kcm, err := kubeconfig("system:kube-controller-manager", "kube-controller-manager")
	if err != nil {
		return err
	}
	sched, err := kubeconfig("system:kube-scheduler", "kube-scheduler")
	if err != nil {
		return err
	}
	stages, err := c.writeKwokStages(runDir, cc)
	if err != nil {
		return err
	}
	p := pki.Path
	for _, ch := range []struct {
		name, binary string
		args         []string
	}{
		{"kube-controller-manager", cc.ControllerManager, append([]string{
			"--kubeconfig=" + kcm,
			"--leader-elect=false",
			"--secure-port=0",
			"--use-service-account-credentials=true",
			"--service-account-private-key-file=" + p("sa.key"),
			"--root-ca-file=" + p("ca.crt"),
			"--cluster-signing-cert-file=" + p("ca.crt"),
			"--cluster-signing-key-file=" + p("ca.key"),
			"--controllers=*,bootstrapsigner,tokencleaner",
		}, cc.ControllerManagerArgs...)},
		{"kube-scheduler", cc.Scheduler, append([]string{
			"--kubeconfig=" + sched,
			"--leader-elect=false",
			"--secure-port=0",
		}, cc.SchedulerArgs...)},
		{"kwok", cc.Kwok, []string{
			"--kubeconfig=" + c.AdminKubeconfig,
			"--manage-all-nodes=true",
			fmt.Sprintf("--node-lease-duration-seconds=%d", cc.KwokNodeLeaseSeconds),
			"--cidr=10.244.0.1/16",
			"--node-ip=127.0.0.1",
			"--config=" + stages,
		}},
	} {
		child, err := StartChild(ch.name, filepath.Join(runDir, c.Name+"-"+ch.name+".log"), ch.binary, ch.args...)
		if err != nil {
			return err
		}
		c.Controllers = append(c.Controllers, child)
	}
	return nil
}

// writeKwokStages joins kwok's stage files from its module into one config.
func (c *Cluster) writeKwokStages(runDir string, cc ClusterConfig) (string, error) {
	var docs []string
	for _, f := range cc.KwokStages {
		data, err := os.ReadFile(filepath.Join(cc.KwokStagesDir, f))
		if err != nil {
			return "", fmt.Errorf("kwok's stages (-kwok-stages): %w", err)
		}
		docs = append(docs, strings.TrimSpace(string(data)))
	}
	path := filepath.Join(runDir, c.Name+"-kwok-stages.yaml")
	return path, os.WriteFile(path, []byte(strings.Join(docs, "\n---\n")+"\n"), 0o644)
}

// FakeNode is a node for kwok to manage: 32 CPUs, 256Gi, 110 pods, with
// extra labels.
func FakeNode(name string, labels map[string]string) *corev1.Node {
	l := map[string]string{
		"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
		"type": "kwok",
	}
	for k, v := range labels {
		l[k] = v
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods: resource.MustParse("110"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
			Labels:      l,
		},
		Status: corev1.NodeStatus{
			Allocatable: capacity,
			Capacity:    capacity.DeepCopy(),
			NodeInfo:    corev1.NodeSystemInfo{KubeletVersion: "fake", OperatingSystem: "linux", Architecture: "amd64"},
			Phase:       corev1.NodeRunning,
		},
	}
}

// AddNodes creates nodes (a few at a time) and waits until kwok has made
// every one Ready and untainted, or timeout passes.
func (c *Cluster) AddNodes(ctx context.Context, nodes []*corev1.Node, timeout time.Duration) error {
	const workers = 8
	work := make(chan *corev1.Node)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for n := range work {
				if _, err := c.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
					select {
					case errs <- fmt.Errorf("creating node %s: %w", n.Name, err):
					default:
					}
				}
			}
		})
	}
	for _, n := range nodes {
		work <- n
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}
	deadline := time.Now().Add(timeout)
	for {
		list, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		ready := 0
		for _, n := range list.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue && len(n.Spec.Taints) == 0 {
					ready++
				}
			}
		}
		if ready >= len(nodes) {
			return nil
		}
		if err := c.CheckControllers(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d simulated nodes Ready and untainted after %v", ready, len(nodes), timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// CheckControllers fails with the log's tail if a controller has exited.
func (c *Cluster) CheckControllers() error {
	for _, ch := range c.Controllers {
		if !ch.Running() {
			return fmt.Errorf("%s exited (%v); log %s:\n%s", ch.Name, ch.WaitErr, ch.LogPath, ch.LogTail())
		}
	}
	return nil
}

// Stop stops the controllers, then the server.
func (c *Cluster) Stop() {
	for _, ch := range c.Controllers {
		if ch.Running() {
			ch.Stop(15 * time.Second)
		}
	}
	c.Server.Stop()
}
