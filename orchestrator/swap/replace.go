package swap

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/orchestrator/observe"
)

// Swapper swaps one target's pod on a node for one on the newest revision,
// Ready, or returns a step error (nodestep.Halt) saying why it cannot.
// deadline (the step's persisted start plus timeout) bounds the wait, so a
// restart does not extend it.
type Swapper interface {
	Swap(ctx context.Context, ref v1alpha1.TargetRef, node string, deadline time.Time, timeout time.Duration) error
}

// Targets are the cache reads a swap makes (observe.Targets).
type Targets interface {
	Target(ref v1alpha1.TargetRef) (model.TargetView, error)
	OnNode(tv model.TargetView, node string) (live []*corev1.Pod, terminating int, err error)
}

// Waits are what both swaps share: the target's reads, the waits on the
// caches for the DaemonSet controller, and the recreate of a new pod stuck
// not Ready (Recreate; nil: none, the swap halts at its timeout).
type Waits struct {
	Targets  Targets
	Changes  *observe.Changes
	Now      func() time.Time
	Recreate *Recreate
}

// Replace is the swap in place: it deletes the target's old pod on the node
// and waits for the DaemonSet controller's new pod to be Ready on the
// newest revision (the node has no ztunnel in between). A new pod still not
// Ready half way through the swap timeout is deleted once (Recreate): the
// DaemonSet controller makes the next.
type Replace struct {
	Waits
	Kube kubernetes.Interface
	Log  *zap.Logger
}

var _ Swapper = Replace{}

// Swap deletes every live pod of the target on the node that is not on the
// newest revision, with a UID precondition: a pod on the newest revision is
// never touched, so a resumed swap cannot swap a node twice, and re-deleting
// a pod that is already terminating (the cache may lag) is harmless.
func (r Replace) Swap(ctx context.Context, ref v1alpha1.TargetRef, node string, deadline time.Time, timeout time.Duration) error {
	tv, err := r.Settled(ctx, ref, deadline, timeout)
	if err != nil {
		return err
	}
	live, _, err := r.Targets.OnNode(tv, node)
	if err != nil {
		return err
	}
	for _, pod := range live {
		if pod.Labels[model.LabelControllerRevisionHash] == tv.NewestHash {
			continue
		}
		uid := pod.UID
		err := r.Kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if Refused(err) {
			return nodestep.Halt(nodestep.HaltSwapFailed, "deleting pod %s/%s on %s: %v", pod.Namespace, pod.Name, node, err)
		}
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		r.Log.Debug("deleted old pod", zap.String("pod", pod.Namespace+"/"+pod.Name), zap.String("node", node))
	}
	return r.readyOrRecreate(ctx, ref, node, deadline, timeout)
}

// Settled waits until the DaemonSet exists and its controller has observed
// the current template, so the newest ControllerRevision is known (bounded
// by the swap timeout, which ends at deadline), and returns the target then.
func (w Waits) Settled(ctx context.Context, ref v1alpha1.TargetRef, deadline time.Time, timeout time.Duration) (model.TargetView, error) {
	for {
		changed := w.Changes.Wait()
		tv, err := w.Targets.Target(ref)
		if err != nil {
			return tv, err
		}
		if !tv.Found {
			return tv, nodestep.Halt(nodestep.HaltPreflightFailed, "DaemonSet %s/%s disappeared", ref.Namespace, ref.Name)
		}
		if tv.Settled {
			return tv, nil
		}
		if !w.Now().Before(deadline) {
			return tv, nodestep.Halt(nodestep.HaltSwapTimeout, "%s/%s: the DaemonSet controller did not observe the current template within the swap timeout %s", ref.Namespace, ref.Name, timeout)
		}
		if err := observe.WaitChange(ctx, changed, deadline, w.Now); err != nil {
			return tv, err
		}
	}
}

// Ready waits until the node has a Ready pod of the target on its newest
// revision, or halts when the swap timeout passes (at deadline).
func (w Waits) Ready(ctx context.Context, ref v1alpha1.TargetRef, node string, deadline time.Time, timeout time.Duration) error {
	for {
		changed := w.Changes.Wait()
		tv, err := w.Targets.Target(ref)
		if err != nil {
			return err
		}
		live, _, err := w.Targets.OnNode(tv, node)
		if err != nil {
			return err
		}
		var why string
		if !tv.Settled {
			live, why = nil, "the DaemonSet controller has not observed the current template yet"
		}
		for _, pod := range live {
			if pod.Labels[model.LabelControllerRevisionHash] != tv.NewestHash {
				why = fmt.Sprintf("pod %s is on revision %s, not %s", pod.Name, pod.Labels[model.LabelControllerRevisionHash], tv.NewestHash)
				continue
			}
			if ok, _ := model.PodReadyCondition(pod); ok {
				return nil
			}
			why = fmt.Sprintf("pod %s on revision %s is not Ready%s", pod.Name, tv.NewestHash, model.WaitingReason(pod))
		}
		if why == "" {
			why = "no pod scheduled yet"
		}
		if !w.Now().Before(deadline) {
			return nodestep.Halt(nodestep.HaltSwapTimeout, "%s/%s not Ready on the new revision within the swap timeout %s: %s", ref.Namespace, ref.Name, timeout, why)
		}
		if err := observe.WaitChange(ctx, changed, deadline, w.Now); err != nil {
			return err
		}
	}
}

// UpToDate says every target has a Ready pod on its newest revision on the node.
func (w Waits) UpToDate(targets []v1alpha1.TargetRef, node string) bool {
	for _, ref := range targets {
		tv, err := w.Targets.Target(ref)
		if err != nil || !tv.Found || !tv.Settled {
			return false
		}
		live, _, err := w.Targets.OnNode(tv, node)
		if err != nil {
			return false
		}
		ok := false
		for _, pod := range live {
			if r, _ := model.PodReadyCondition(pod); r && pod.Labels[model.LabelControllerRevisionHash] == tv.NewestHash {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// Refused says the API server refused a swap's write for good (RBAC, an
// admission policy, a quota, an invalid object): retrying the same write
// changes nothing, so the swap halts with the API's reason instead of
// leaving the node Progressing while its worker retries forever.
func Refused(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsMethodNotSupported(err)
}
