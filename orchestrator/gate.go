package orchestrator

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
)

// GateInput is what a gate judges: one node, its soak window and the rollout's gate spec.
type GateInput struct {
	Node          string
	BaselineStart time.Time // start of the baseline window (before the swap)
	SwapStart     time.Time
	SoakStart     time.Time // the node was uncordoned on the new revision
	Now           time.Time
	Spec          v1alpha1.GatesSpec
	// SwappedInPlace: ztunnel was swapped on the node without a drain (drain
	// policy never, or no finished drain recorded since the cordon), so the
	// connections older than ztunnel's drain deadline were reset as planned.
	// Read back from the node's annotations after a restart.
	SwappedInPlace bool
	// ZtunnelGrace is terminationGracePeriodSeconds of the ztunnel target's
	// pod template (default 30 s): ztunnel's drain deadline derives from it.
	ZtunnelGrace time.Duration
}

// Gate decides whether a node that finished its soak may count as done. An
// error is treated as Fail (gates fail closed). The judge in package health
// plugs in here.
type Gate interface {
	Judge(ctx context.Context, in GateInput) (health.Verdict, error)
}

// Preparer is implemented by gates that sample before the swap (the judge):
// Prepare is called when a node enters preflight, before its baseline window,
// and again after a restart (it must be idempotent). An error halts the node.
type Preparer interface {
	Prepare(ctx context.Context, node string) error
}

// Releaser is implemented by gates that hold per-node state: Done is called
// when a node leaves the rollout, judged or not.
type Releaser interface {
	Done(node string)
}

// GateFunc adapts a function to Gate.
type GateFunc func(ctx context.Context, in GateInput) (health.Verdict, error)

// Judge calls f.
func (f GateFunc) Judge(ctx context.Context, in GateInput) (health.Verdict, error) { return f(ctx, in) }

// ReadinessGate is the default gate until the judge is wired in: the node is
// Ready, the node's target pods are Ready, and no pod on the node that existed
// when the soak began went from Ready to not Ready during it. Everything it
// reads is in the API (condition transition times), so a successor judges the
// same way after a crash.
type ReadinessGate struct {
	Nodes corelisters.NodeLister
	Pods  corelisters.PodLister
}

// Judge implements Gate.
func (g ReadinessGate) Judge(_ context.Context, in GateInput) (health.Verdict, error) {
	node, err := g.Nodes.Get(in.Node)
	if err != nil {
		return health.Verdict{}, fmt.Errorf("reading node %s: %w", in.Node, err)
	}
	var reasons []string
	if !nodeReady(node) {
		reasons = append(reasons, fmt.Sprintf("node %s is not Ready", in.Node))
	}
	pods, err := g.Pods.List(labels.Everything())
	if err != nil {
		return health.Verdict{}, fmt.Errorf("listing pods: %w", err)
	}
	for _, p := range pods {
		if p.Spec.NodeName != in.Node || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		ready, since := podReadyCondition(p)
		// A pod counts as there at soak start only once it had started: a
		// replica scheduled just before the soak and still starting has not
		// gone from Ready to not Ready (under load it was judged so).
		existed := p.Status.StartTime != nil && p.Status.StartTime.Time.Before(in.SoakStart)
		switch {
		case existed && !ready:
			reasons = append(reasons, fmt.Sprintf("pod %s/%s went not Ready during the soak", p.Namespace, p.Name))
		case existed && ready && since.After(in.SoakStart):
			reasons = append(reasons, fmt.Sprintf("pod %s/%s flapped Ready during the soak (last transition %s)", p.Namespace, p.Name, since.UTC().Format(time.RFC3339)))
		case !existed && !ready && isTargetPod(p):
			reasons = append(reasons, fmt.Sprintf("pod %s/%s is not Ready", p.Namespace, p.Name))
		}
	}
	if len(reasons) > 0 {
		return health.Verdict{Outcome: health.Fail, Reasons: reasons}, nil
	}
	return health.Verdict{Outcome: health.Pass, Reasons: []string{"node and pods Ready through the soak"}}, nil
}

func isTargetPod(p *corev1.Pod) bool {
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}

func podReadyCondition(p *corev1.Pod) (bool, time.Time) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue, c.LastTransitionTime.Time
		}
	}
	return false, time.Time{}
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
