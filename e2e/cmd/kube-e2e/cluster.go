package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/watchkeeper/watchkeeper/e2e/internal/kubecluster"
)

// simulatedNodes is how many nodes kwok runs: the e2e framework's tests
// that spread pods want at least two.
const simulatedNodes = 3

// startCluster starts a cluster for Kubernetes' e2e tests on the cache
// decorator: kwok's "fast" stages, nodes kept alive by kwok's leases, and
// simulatedNodes nodes Ready.
func startCluster(ctx context.Context, run *runDir, cfg config, decorator string) (*kubecluster.Cluster, error) {
	args := []string{"--allow-privileged=true"}
	if decorator == "watchkeeper" {
		args = append(args, strings.Fields(cfg.watchkeeperArgs)...)
	}
	c, err := kubecluster.StartCluster(ctx, run.dir, run.pki, kubecluster.ClusterConfig{
		KubeAPIServer:        cfg.kubeAPIServer,
		ControllerManager:    cfg.controllerManager,
		Scheduler:            cfg.scheduler,
		Kwok:                 cfg.kwok,
		KwokStagesDir:        cfg.kwokStages,
		KwokStages:           kubecluster.FastKwokStages,
		KwokNodeLeaseSeconds: 40,
		ServerArgs:           args,
	}, "cluster-"+decorator, decorator)
	if err != nil {
		return nil, err
	}
	var nodes []*corev1.Node
	for i := range simulatedNodes {
		nodes = append(nodes, kubecluster.FakeNode(fmt.Sprintf("kwok-node-%d", i), nil))
	}
	if err := c.AddNodes(ctx, nodes, 2*time.Minute); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}
