package swap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
)

// AnnotationRecreatedPrefix + the target's name on a Node is the node's
// record of a swap that recreated its new pod once, stuck not Ready
// (Recreated, as JSON). It is written before the pod is deleted, so a
// leader that takes over mid-swap finds it and does not recreate again.
// It is one of the orchestrator's nodewise.io/ annotations, which the
// admission policy nodewise-orchestrator-node-writes lets it write.
const AnnotationRecreatedPrefix = "nodewise.io/recreated-"

// EventNewPodRecreated is the reason of the Events saying so.
const EventNewPodRecreated = "NewPodRecreated"

// Recreate deletes, once per swap, a new pod that is still not Ready half
// way through the swap timeout, and lets the swap wait for the next one
// until its deadline. A fresh ztunnel can stay stuck not Ready while
// istio-cni answers it 500 (istio/istio#61374, ztunnel#1674: about one in
// ten), which its recreation clears, as a person would do it. The record
// of the recreate (the node's AnnotationRecreatedPrefix annotation) names
// the swap's attempt by its deadline (the step's persisted start plus the
// swap timeout), so a swap resumed by another leader recreates nothing
// again; a new attempt (a retried or resumed node) may recreate once more.
type Recreate struct {
	Kube     kubernetes.Interface
	Recorder record.EventRecorder
	Log      *zap.Logger
	Now      func() time.Time
}

// Recreated is the node's record of a recreate.
type Recreated struct {
	// Attempt is the swap's deadline: it names the swap attempt.
	Attempt time.Time `json:"attempt"`
	// Pod, UID and Revision name the pod deleted; Why says how it was
	// stuck (its containers' waiting reasons), Since when it was created.
	Pod      string    `json:"pod"`
	UID      types.UID `json:"uid"`
	Revision string    `json:"revision"`
	Why      string    `json:"why,omitempty"`
	Since    time.Time `json:"since"`
	// At is when it was deleted; Until bounds the wait for the next pod
	// (the deadline the swap had then: a recreate never extends it).
	At    time.Time `json:"at"`
	Until time.Time `json:"until"`
}

// recreateDue is when a new pod still not Ready is recreated: half the swap
// timeout before the swap's deadline.
func recreateDue(deadline time.Time, timeout time.Duration) time.Time {
	return deadline.Add(-timeout / 2)
}

// Done is the node's record of this attempt's recreate of the target's
// new pod, nil when there is none.
func (r *Recreate) Done(ctx context.Context, target, node string, attempt time.Time) (*Recreated, error) {
	n, err := r.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading node %s for its record of a recreate: %w", node, err)
	}
	return recreatedOf(n, target, attempt), nil
}

func recreatedOf(n *corev1.Node, target string, attempt time.Time) *Recreated {
	var rc Recreated
	if json.Unmarshal([]byte(n.Annotations[AnnotationRecreatedPrefix+target]), &rc) != nil || !rc.Attempt.Equal(attempt) {
		return nil // none, or an earlier attempt's
	}
	return &rc
}

// Once recreates pod, the target's new pod on the node stuck not Ready:
// it records the recreate on the node (a write conditional on the node's
// resourceVersion), then deletes the pod (conditional on its UID) and says
// so in Events on the node and its rollout. When the node already records
// a recreate of this attempt, it returns that, and deletes pod only if the
// record names it (a leader stopped between the record and the delete).
func (r *Recreate) Once(ctx context.Context, ref v1alpha1.TargetRef, node string, pod *corev1.Pod, attempt, until time.Time) (*Recreated, error) {
	now := r.Now()
	rc := &Recreated{Attempt: attempt, Pod: pod.Name, UID: pod.UID, Revision: pod.Labels[model.LabelControllerRevisionHash],
		Why: model.WaitingReason(pod), Since: pod.CreationTimestamp.Time, At: now, Until: until}
	value, err := json.Marshal(rc)
	if err != nil {
		return nil, err
	}
	var n *corev1.Node
	for i := 0; ; i++ {
		if n, err = r.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil {
			return nil, fmt.Errorf("reading node %s to record a recreate: %w", node, err)
		}
		if done := recreatedOf(n, ref.Name, attempt); done != nil {
			if done.UID == pod.UID {
				return done, r.delete(ctx, pod, node)
			}
			return done, nil
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": n.ResourceVersion, "annotations": map[string]string{AnnotationRecreatedPrefix + ref.Name: string(value)}}})
		_, err = r.Kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: model.FieldManager})
		if err == nil {
			break
		}
		if Refused(err) {
			return nil, nodestep.Halt(nodestep.HaltSwapFailed, "recording the recreate of pod %s/%s on node %s: %v", pod.Namespace, pod.Name, node, err)
		}
		if !apierrors.IsConflict(err) || i == 4 {
			return nil, fmt.Errorf("recording the recreate of pod %s/%s on node %s: %w", pod.Namespace, pod.Name, node, err)
		}
	}
	if err := r.delete(ctx, pod, node); err != nil {
		return nil, err
	}
	msg := fmt.Sprintf("the new %s was stuck not Ready; recreated it once: pod %s on revision %s was not Ready%s %s after its creation; its successor has until %s",
		ref.Name, pod.Name, rc.Revision, rc.Why, now.Sub(rc.Since).Round(time.Second), until.UTC().Format(time.RFC3339))
	r.Log.Warn(msg, zap.String("node", node))
	if r.Recorder != nil {
		r.Recorder.Event(&corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node, UID: n.UID}, corev1.EventTypeWarning, EventNewPodRecreated, msg)
		if name, uid := n.Annotations[model.AnnotationRollout], n.Annotations[model.AnnotationRolloutUID]; name != "" && uid != "" {
			r.Recorder.Event(&corev1.ObjectReference{Kind: "NodeRollout", APIVersion: v1alpha1.GroupVersion.String(), Name: name, UID: types.UID(uid)},
				corev1.EventTypeWarning, EventNewPodRecreated, fmt.Sprintf("node %s: %s", node, msg))
		}
	}
	return rc, nil
}

// delete deletes the stuck pod (by its UID: gone or replaced is no error).
func (r *Recreate) delete(ctx context.Context, pod *corev1.Pod, node string) error {
	uid := pod.UID
	err := r.Kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if Refused(err) {
		return nodestep.Halt(nodestep.HaltSwapFailed, "deleting the stuck pod %s/%s on %s: %v", pod.Namespace, pod.Name, node, err)
	}
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting the stuck pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// explain adds the recreate to a swap timeout's reason: the halt names
// both tries, the recreated pod and its successor (err's).
func (rc *Recreated) explain(err error) error {
	var se *nodestep.StepError
	if rc == nil || !errors.As(err, &se) || se.Halt != nodestep.HaltSwapTimeout {
		return err
	}
	return &nodestep.StepError{Halt: se.Halt, Skip: se.Skip, Reason: se.Reason + rc.tries()}
}

func (rc *Recreated) tries() string {
	if rc == nil {
		return ""
	}
	return fmt.Sprintf("; the new pod before it, %s (uid %s), was stuck not Ready%s too and was recreated once at %s",
		rc.Pod, rc.UID, rc.Why, rc.At.UTC().Format(time.RFC3339))
}

// stuck is the target's live pod on the node on its newest revision that is
// not Ready (nil when there is none).
func (w Waits) stuck(ref v1alpha1.TargetRef, node string) *corev1.Pod {
	tv, err := w.Targets.Target(ref)
	if err != nil || !tv.Found || !tv.Settled {
		return nil
	}
	live, _, err := w.Targets.OnNode(tv, node)
	if err != nil {
		return nil
	}
	for _, p := range live {
		if p.Labels[model.LabelControllerRevisionHash] == tv.NewestHash && !podIsReady(p) {
			return p
		}
	}
	return nil
}

// readyOrRecreate is Ready, recreating the new pod once when it is not
// Ready half way through the swap timeout (Recreate), and waiting for its
// successor until the deadline.
func (w Waits) readyOrRecreate(ctx context.Context, ref v1alpha1.TargetRef, node string, deadline time.Time, timeout time.Duration) error {
	if w.Recreate == nil {
		return w.Ready(ctx, ref, node, deadline, timeout)
	}
	err := w.Ready(ctx, ref, node, recreateDue(deadline, timeout), timeout)
	var se *nodestep.StepError
	if !errors.As(err, &se) || se.Halt != nodestep.HaltSwapTimeout {
		return err
	}
	done, err := w.Recreate.Done(ctx, ref.Name, node, deadline)
	if err != nil {
		return err
	}
	if pod := w.stuck(ref, node); pod != nil && (done == nil || done.UID == pod.UID) && w.Now().Before(deadline) {
		if done, err = w.Recreate.Once(ctx, ref, node, pod, deadline, deadline); err != nil {
			return err
		}
	}
	return done.explain(w.Ready(ctx, ref, node, deadline, timeout))
}
