package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"golang.org/x/sync/errgroup"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// AnnotationReady set to "false" on a simulated Node makes its kubelet report
// the node NotReady, as a node whose runtime failed would. Removing it, or
// setting "true", makes the node Ready again.
const AnnotationReady = "sim.nodewise.io/ready"

// ZoneLabel is the well-known topology label the nodes carry.
const ZoneLabel = "topology.kubernetes.io/zone"

// NodeSpec is one simulated node.
type NodeSpec struct {
	Name    string `json:"name"`
	Zone    string `json:"zone"`
	PodCIDR string `json:"podCIDR"`
	// IP is the node's InternalIP, on loopback, so that anything the API
	// server dials on a node (logs, exec) stays on this machine.
	IP string `json:"ip"`
}

func (n *NodeSpec) cidrPrefix() string { return strings.TrimSuffix(n.PodCIDR, ".0/24") }

// nodeSpecs lays out n nodes round-robin over z zones.
func nodeSpecs(n, z int) []NodeSpec {
	specs := make([]NodeSpec, n)
	for i := range specs {
		specs[i] = NodeSpec{
			Name:    fmt.Sprintf("node-%03d", i+1),
			Zone:    fmt.Sprintf("zone-%c", 'a'+i%z),
			PodCIDR: podCIDR(i),
			IP:      fmt.Sprintf("127.1.%d.%d", i/250, i%250+1),
		}
	}
	return specs
}

// podCIDR is node i's (from 0) pod CIDR; see podCIDRBase.
func podCIDR(i int) string {
	if i < 256 {
		return fmt.Sprintf("%s.%d.0/24", podCIDRBase, i)
	}
	j := i - 256
	return fmt.Sprintf("%d.%d.%d.0/24", podCIDRWide, 64+j/256, j%256)
}

// registerNodes creates the Node objects that do not exist yet and reports
// their status, as each kubelet does when it starts.
func (k *Kubelet) registerNodes(ctx context.Context) error {
	// 16 at a time: one after another, thousands of nodes (three requests
	// each) took longer to register than the cluster's start allows.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, spec := range k.cfg.Nodes {
		g.Go(func() error { return k.registerNode(gctx, spec) })
	}
	return g.Wait()
}

// registerNode creates the node (unless it is there) and reports its status.
func (k *Kubelet) registerNode(ctx context.Context, spec NodeSpec) error {
	node, err := k.client.CoreV1().Nodes().Get(ctx, spec.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		node, err = k.client.CoreV1().Nodes().Create(ctx, newNode(spec), metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("registering node %s: %w", spec.Name, err)
	}
	// Another component (the node-lifecycle controller, a kubelet that ran
	// before) may write the node meanwhile: report again from a fresh read.
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		err := k.reportNodeStatus(ctx, node)
		if apierrors.IsConflict(err) {
			if fresh, gerr := k.client.CoreV1().Nodes().Get(ctx, spec.Name, metav1.GetOptions{}); gerr == nil {
				node = fresh
			}
		}
		return err
	})
}

func newNode(spec NodeSpec) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: spec.Name,
			Labels: map[string]string{
				"kubernetes.io/hostname":           spec.Name,
				"kubernetes.io/os":                 "linux",
				"kubernetes.io/arch":               "amd64",
				"node.kubernetes.io/instance-type": "nodewise-sim",
				"topology.kubernetes.io/region":    "sim",
				ZoneLabel:                          spec.Zone,
			},
		},
		Spec: corev1.NodeSpec{PodCIDR: spec.PodCIDR, PodCIDRs: []string{spec.PodCIDR}},
	}
}

// reportNodeStatus writes the node's capacity, addresses and the Ready
// condition its AnnotationReady asks for.
func (k *Kubelet) reportNodeStatus(ctx context.Context, node *corev1.Node) error {
	spec := k.nodes[node.Name]
	n := node.DeepCopy()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("16"),
		corev1.ResourceMemory: resource.MustParse("64Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	n.Status.Capacity, n.Status.Allocatable = capacity, capacity
	n.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: spec.IP},
		{Type: corev1.NodeHostName, Address: spec.Name},
	}
	n.Status.NodeInfo = corev1.NodeSystemInfo{
		KubeletVersion: "v1.37.2-nodewise-sim", ContainerRuntimeVersion: "sim://1",
		OperatingSystem: "linux", Architecture: "amd64", OSImage: "nodewise simulated node",
		KernelVersion: "sim", MachineID: spec.Name, SystemUUID: spec.Name, BootID: spec.Name,
	}
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = 10250
	now := metav1.Now()
	ready, reason, msg := corev1.ConditionTrue, "KubeletReady", "simulated kubelet is posting ready status"
	if node.Annotations[AnnotationReady] == "false" {
		ready, reason, msg = corev1.ConditionFalse, "SimulatedFault", "made NotReady through the "+AnnotationReady+" annotation"
	}
	conds := []corev1.NodeCondition{
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory"},
		{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure"},
		{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID"},
		{Type: corev1.NodeReady, Status: ready, Reason: reason, Message: msg},
	}
	kubelets := map[corev1.NodeConditionType]bool{}
	for i := range conds {
		kubelets[conds[i].Type] = true
		conds[i].LastHeartbeatTime = now
		conds[i].LastTransitionTime = now
		for _, old := range node.Status.Conditions {
			if old.Type == conds[i].Type && old.Status == conds[i].Status {
				conds[i].LastTransitionTime = old.LastTransitionTime
			}
		}
	}
	for _, old := range node.Status.Conditions {
		if !kubelets[old.Type] {
			conds = append(conds, old) // another writer's (a lifecycle condition): kept, as the kubelet keeps them
		}
	}
	n.Status.Conditions = conds
	if _, err := k.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("reporting status of node %s: %w", node.Name, err)
	}
	return nil
}

// reconcileNodeReady reports a node's status when its Ready condition no
// longer matches what its AnnotationReady asks for.
func (k *Kubelet) reconcileNodeReady(ctx context.Context, node *corev1.Node) {
	if _, ours := k.nodes[node.Name]; !ours {
		return
	}
	want := corev1.ConditionTrue
	if node.Annotations[AnnotationReady] == "false" {
		want = corev1.ConditionFalse
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == want {
			return
		}
	}
	if err := k.reportNodeStatus(ctx, node); err != nil && !apierrors.IsConflict(err) {
		k.log.Warn("reporting node status", zap.String("node", node.Name), zap.Error(err))
	}
}

// heartbeat renews every node's lease, which is how the node lifecycle
// controller knows the node's kubelet is alive, until ctx ends. It costs one
// request per node per Heartbeat, as a kubelet's lease controller does: each
// renewal updates the lease it last wrote (a Get only after a conflict or on
// first use). The renewals go out at a steady pace, one every
// Heartbeat / nodes, round the fleet, so the API server sees a constant rate
// rather than bursts; up to renewers run at once, as real kubelets renew
// independently: one slow request must not hold up a thousand nodes' leases.
func (k *Kubelet) heartbeat(ctx context.Context) {
	const renewers = 16
	pace := time.NewTicker(max(k.cfg.Heartbeat/time.Duration(len(k.cfg.Nodes)), time.Millisecond))
	defer pace.Stop()
	sem := make(chan struct{}, renewers)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := 0; ; i = (i + 1) % len(k.cfg.Nodes) {
		select {
		case <-ctx.Done():
			return
		case sem <- struct{}{}:
		}
		wg.Add(1)
		go func(name string) {
			defer func() { <-sem; wg.Done() }()
			k.renewLease(ctx, name)
		}(k.cfg.Nodes[i].Name)
		select {
		case <-ctx.Done():
			return
		case <-pace.C:
		}
	}
}

// renewLease renews one node's lease from the copy last written.
func (k *Kubelet) renewLease(ctx context.Context, name string) {
	leases := k.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	k.mu.Lock()
	lease := k.leases[name]
	k.mu.Unlock()
	var err error
	if lease == nil {
		lease, err = leases.Get(ctx, name, metav1.GetOptions{})
	}
	switch {
	case apierrors.IsNotFound(err):
		duration := int32(4 * k.cfg.Heartbeat / time.Second) // a kubelet's 40 s at 10 s
		lease, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: &name, LeaseDurationSeconds: &duration, RenewTime: &now},
		}, metav1.CreateOptions{})
	case err == nil:
		lease = lease.DeepCopy()
		lease.Spec.RenewTime = &now
		lease, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	}
	if err != nil {
		lease = nil // read it afresh next time
		if ctx.Err() == nil {
			k.log.Debug("renewing node lease", zap.String("node", name), zap.Error(err))
		}
	}
	k.mu.Lock()
	k.leases[name] = lease
	k.mu.Unlock()
}

// SetNodeReady makes a simulated node Ready or NotReady through AnnotationReady.
func SetNodeReady(ctx context.Context, client kubernetes.Interface, node string, ready bool) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{AnnotationReady: fmt.Sprint(ready)}}})
	_, err := client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("marking node %s ready=%t: %w", node, ready, err)
	}
	return nil
}
