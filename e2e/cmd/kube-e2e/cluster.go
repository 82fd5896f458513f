package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchkeeper/watchkeeper/e2e/internal/kubecluster"
)

// cluster is a kube-apiserver (with one cache) and what makes it a cluster
// for Kubernetes' e2e tests: kube-controller-manager, kube-scheduler, and
// kwok's simulated nodes, on which pods reach Running.
type cluster struct {
	*server
	controllers []*kubecluster.Child
}

// The kwok stages the cluster runs, as kwokctl's default "fast" set: nodes
// initialized at once and kept alive by their leases, pods Ready at once,
// completed and deleted as a kubelet would.
var kwokStages = []string{
	"node/fast/node-initialize.yaml",
	"node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
	"pod/fast/pod-ready.yaml",
	"pod/fast/pod-complete.yaml",
	"pod/fast/pod-delete.yaml",
}

// simulatedNodes is how many nodes kwok runs: the e2e framework's tests
// that spread pods want at least two.
const simulatedNodes = 3

func startCluster(ctx context.Context, run *runDir, cfg config, decorator string) (*cluster, error) {
	name := "cluster-" + decorator
	args := []string{"--allow-privileged=true"}
	if decorator == "watchkeeper" {
		args = append(args, strings.Fields(cfg.watchkeeperArgs)...)
	}
	s, err := startServer(ctx, run, cfg.kubeAPIServer, serverConfig{name: name, decorator: decorator, args: args})
	if err != nil {
		return nil, err
	}
	c := &cluster{server: s}
	if err := c.startControllers(run, cfg); err != nil {
		c.stop()
		return nil, err
	}
	if err := c.addNodes(ctx); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// startControllers starts kube-controller-manager, kube-scheduler and kwok,
// each with a kubeconfig of its own identity.
func (c *cluster) startControllers(run *runDir, cfg config) error {
	kubeconfig := func(user, file string) (string, error) {
		path := filepath.Join(run.dir, c.name+"-"+file+".kubeconfig")
		return path, run.pki.WriteCertKubeconfig(path, c.url, user, file)
	}
	kcm, err := kubeconfig("system:kube-controller-manager", "kube-controller-manager")
	if err != nil {
		return err
	}
	sched, err := kubeconfig("system:kube-scheduler", "kube-scheduler")
	if err != nil {
		return err
	}
	stages, err := c.writeKwokStages(run, cfg.kwokStages)
	if err != nil {
		return err
	}
	p := run.pki.Path
	for _, ch := range []struct {
		name, binary string
		args         []string
	}{
		{"kube-controller-manager", cfg.controllerManager, []string{
			"--kubeconfig=" + kcm,
			"--leader-elect=false",
			"--secure-port=0",
			"--use-service-account-credentials=true",
			"--service-account-private-key-file=" + p("sa.key"),
			"--root-ca-file=" + p("ca.crt"),
			"--cluster-signing-cert-file=" + p("ca.crt"),
			"--cluster-signing-key-file=" + p("ca.key"),
			"--controllers=*,bootstrapsigner,tokencleaner",
		}},
		{"kube-scheduler", cfg.scheduler, []string{
			"--kubeconfig=" + sched,
			"--leader-elect=false",
			"--secure-port=0",
		}},
		{"kwok", cfg.kwok, []string{
			"--kubeconfig=" + c.adminKubeconfig,
			"--manage-all-nodes=true",
			"--node-lease-duration-seconds=40",
			"--cidr=10.244.0.1/16",
			"--node-ip=127.0.0.1",
			"--config=" + stages,
		}},
	} {
		child, err := kubecluster.StartChild(ch.name, filepath.Join(run.dir, c.name+"-"+ch.name+".log"), ch.binary, ch.args...)
		if err != nil {
			return err
		}
		c.controllers = append(c.controllers, child)
	}
	return nil
}

// writeKwokStages joins kwok's stage files from its module into one config.
func (c *cluster) writeKwokStages(run *runDir, dir string) (string, error) {
	var docs []string
	for _, f := range kwokStages {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return "", fmt.Errorf("kwok's stages (-kwok-stages): %w", err)
		}
		docs = append(docs, strings.TrimSpace(string(data)))
	}
	path := filepath.Join(run.dir, c.name+"-kwok-stages.yaml")
	return path, os.WriteFile(path, []byte(strings.Join(docs, "\n---\n")+"\n"), 0o644)
}

// addNodes creates the simulated nodes and waits until kwok has made them
// Ready.
func (c *cluster) addNodes(ctx context.Context) error {
	for i := range simulatedNodes {
		name := fmt.Sprintf("kwok-node-%d", i)
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name:        name,
				Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
				Labels: map[string]string{
					"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
					"type": "kwok",
				},
			},
			Status: corev1.NodeStatus{
				Allocatable: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("256Gi"),
					corev1.ResourcePods: resource.MustParse("110"),
				},
				Capacity: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("256Gi"),
					corev1.ResourcePods: resource.MustParse("110"),
				},
				NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "fake", OperatingSystem: "linux", Architecture: "amd64"},
				Phase:    corev1.NodeRunning,
			},
		}
		if _, err := c.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		nodes, err := c.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		ready := 0
		for _, n := range nodes.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue && len(n.Spec.Taints) == 0 {
					ready++
				}
			}
		}
		if ready == simulatedNodes {
			return nil
		}
		for _, ch := range c.controllers {
			if !ch.Running() {
				return fmt.Errorf("%s exited (%v); log %s:\n%s", ch.Name, ch.WaitErr, ch.LogPath, ch.LogTail())
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d simulated nodes Ready and untainted after 2m", ready, simulatedNodes)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// stop stops the controllers, then the server.
func (c *cluster) stop() {
	for _, ch := range c.controllers {
		if ch.Running() {
			ch.Stop(15 * time.Second)
		}
	}
	c.server.stop()
}
