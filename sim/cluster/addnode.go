package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
)

// AddNode registers one more simulated node, number len(c.Nodes)+1 (its
// name, zone, pod CIDR and IP follow the cluster's layout), and runs its
// kubelet in the calling process until stop is called: a node joining a
// running cluster, as a cluster autoscaler would add one. The new node's pods
// run on rt (nil runs none). Stopping leaves the Node object behind, as a
// kubelet that stops does.
func (c *Cluster) AddNode(ctx context.Context, rt Runtime) (spec NodeSpec, stop func(), err error) {
	specs := nodeSpecs(len(c.Nodes)+1, max(c.state.Options.Zones, 1))
	spec = specs[len(specs)-1]
	cfg, err := restConfig(filepath.Join(c.Dir, "kubelet.kubeconfig"))
	if err != nil {
		return spec, nil, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return spec, nil, err
	}
	k, err := NewKubelet(client, KubeletConfig{Nodes: []NodeSpec{spec}, ReadyDelay: c.state.Options.ReadyDelay,
		Heartbeat: c.state.Options.Heartbeat, Runtime: rt, Log: c.state.Options.Log})
	if err != nil {
		return spec, nil, err
	}
	kctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	errs := make(chan error, 1)
	go func() {
		defer close(done)
		errs <- k.Run(kctx)
	}()
	stop = func() { cancel(); <-done }
	select {
	case err := <-errs:
		cancel()
		return spec, nil, fmt.Errorf("kubelet of added node %s: %w", spec.Name, err)
	case <-time.After(100 * time.Millisecond):
	case <-ctx.Done():
		stop()
		return spec, nil, ctx.Err()
	}
	c.Nodes = append(c.Nodes, spec)
	return spec, stop, nil
}
