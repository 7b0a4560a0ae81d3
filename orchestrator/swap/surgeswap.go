package swap

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/orchestrator/observe"
)

// Surge is the make-before-break swap of ztunnel (Surger) for the worker:
// it observes from the informer caches and wakes on their changes; its
// writes are Surger's, each idempotent. deadline (the record's start plus
// the swap timeout), or once the bridge exists its creation plus the swap
// timeout, bounds the wait for the new pod to be Ready: a bridge still not
// Ready half way through is recreated once (Recreate), and past the
// deadline the never-Ready bridge is deleted and the rollout halts, the old
// ztunnel still serving.
type Surge struct {
	Waits
	Kube       kubernetes.Interface
	Log        *zap.Logger
	DaemonSets appslisters.DaemonSetLister
	Revisions  appslisters.ControllerRevisionLister
	Pods       interface {
		OnNode(node string) ([]*corev1.Pod, error)
	}
}

var _ Swapper = Surge{}

// Swap waits for the DaemonSet controller to settle, then surges.
func (s Surge) Swap(ctx context.Context, ref v1alpha1.TargetRef, node string, deadline time.Time, timeout time.Duration) error {
	if _, err := s.Settled(ctx, ref, deadline, timeout); err != nil {
		return err
	}
	sg := Surger{
		Kube: s.Kube, Log: s.Log.With(zap.String("node", node)), Now: s.Now, Poll: observe.IdleCheck,
		Observe: func(context.Context) (SurgeInput, error) { return s.observe(ref, node) },
		Changes: s.Changes.Wait, BridgeTimeout: timeout, Recreate: s.Recreate,
	}
	res, err := sg.Swap(ctx, ref, node, deadline)
	switch {
	case errors.Is(err, ErrSurgeTimeout):
		return nodestep.Halt(nodestep.HaltSwapTimeout, "%s (swap timeout %s)", err, timeout)
	case errors.Is(err, ErrSurgeBridgeFailed):
		return nodestep.Halt(nodestep.HaltSwapFailed, "%s", err)
	case Refused(err):
		return nodestep.Halt(nodestep.HaltSwapFailed, "surge swap of %s/%s: %v", ref.Namespace, ref.Name, err)
	}
	if err != nil {
		return fmt.Errorf("surge swap of %s/%s on %s: %w", ref.Namespace, ref.Name, node, err)
	}
	s.Log.Debug("surge swap done", zap.String("node", node), zap.String("pod", res.Pod), zap.String("bridge", res.Bridge),
		zap.Strings("retired", res.Retired), zap.Int("writes", res.Writes))
	return nil
}

// observe is the surge step's input from the caches.
func (s Surge) observe(ref v1alpha1.TargetRef, node string) (SurgeInput, error) {
	ds, err := s.DaemonSets.DaemonSets(ref.Namespace).Get(ref.Name)
	if err != nil {
		return SurgeInput{Node: node}, fmt.Errorf("reading DaemonSet %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	revs, err := s.Revisions.ControllerRevisions(ref.Namespace).List(labels.Everything())
	if err != nil {
		return SurgeInput{Node: node}, fmt.Errorf("listing ControllerRevisions in %s: %w", ref.Namespace, err)
	}
	onNode, err := s.Pods.OnNode(node)
	if err != nil {
		return SurgeInput{Node: node}, fmt.Errorf("listing pods on node %s: %w", node, err)
	}
	var pods []*corev1.Pod
	for _, p := range onNode {
		if p.Namespace == ref.Namespace {
			pods = append(pods, p)
		}
	}
	return InputOf(ds, revs, pods, node)
}
