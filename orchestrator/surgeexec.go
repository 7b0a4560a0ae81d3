package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/orchestrator/observe"
	"github.com/nodewise/nodewise/orchestrator/swap"
)

// surge runs the surge swap (surge.go) of ztunnel on the node for the
// executor: it observes from the informer caches and wakes on their changes;
// its writes are Surger's, each idempotent. deadline (the record's start
// plus the swap timeout, the record before it when the swap has none of its
// own), or once the bridge exists its creation plus the swap timeout, bounds
// the wait for the new pod to be Ready: past it the never-Ready bridge is
// deleted and the rollout halts, the old ztunnel still serving.
func (e *executor) surge(ctx context.Context, ref v1alpha1.TargetRef, node string, deadline time.Time, timeout time.Duration) error {
	s := swap.Surger{
		Kube: e.o.kube, Log: e.o.log.With(zap.String("node", node)), Now: e.o.cfg.Now, Poll: observe.IdleCheck,
		Observe: func(context.Context) (swap.SurgeInput, error) { return e.observeSurge(ref, node) },
		Changes: e.changes.Wait, BridgeTimeout: timeout,
	}
	res, err := s.Swap(ctx, ref, node, deadline)
	switch {
	case errors.Is(err, swap.ErrSurgeTimeout):
		return nodestep.Halt(nodestep.HaltSwapTimeout, "%s (swap timeout %s)", err, timeout)
	case errors.Is(err, swap.ErrSurgeBridgeFailed):
		return nodestep.Halt(nodestep.HaltSwapFailed, "%s", err)
	case refused(err):
		return nodestep.Halt(nodestep.HaltSwapFailed, "surge swap of %s/%s: %v", ref.Namespace, ref.Name, err)
	}
	if err != nil {
		return fmt.Errorf("surge swap of %s/%s on %s: %w", ref.Namespace, ref.Name, node, err)
	}
	e.o.log.Debug("surge swap done", zap.String("node", node), zap.String("pod", res.Pod), zap.String("bridge", res.Bridge),
		zap.Strings("retired", res.Retired), zap.Int("writes", res.Writes))
	return nil
}

// observeSurge is the surge step's input from the caches.
func (e *executor) observeSurge(ref v1alpha1.TargetRef, node string) (swap.SurgeInput, error) {
	ds, err := e.dss.DaemonSets(ref.Namespace).Get(ref.Name)
	if err != nil {
		return swap.SurgeInput{Node: node}, fmt.Errorf("reading DaemonSet %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	revs, err := e.revs.ControllerRevisions(ref.Namespace).List(labels.Everything())
	if err != nil {
		return swap.SurgeInput{Node: node}, fmt.Errorf("listing ControllerRevisions in %s: %w", ref.Namespace, err)
	}
	onNode, err := e.pods.OnNode(node)
	if err != nil {
		return swap.SurgeInput{Node: node}, fmt.Errorf("listing pods on node %s: %w", node, err)
	}
	var pods []*corev1.Pod
	for _, p := range onNode {
		if p.Namespace == ref.Namespace {
			pods = append(pods, p)
		}
	}
	return swap.InputOf(ds, revs, pods, node)
}

// refused says the API server refused a swap's write for good (RBAC, an
// admission policy, a quota, an invalid object): retrying the same write
// changes nothing, so the swap halts with the API's reason instead of
// leaving the node Progressing while its worker retries forever.
func refused(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsMethodNotSupported(err)
}
