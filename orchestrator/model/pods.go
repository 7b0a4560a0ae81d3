package model

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// IsTargetPod is a pod a DaemonSet owns (a target's, or another node daemon's).
func IsTargetPod(p *corev1.Pod) bool {
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}

// PodReadyCondition is the pod's Ready condition and when it last changed.
func PodReadyCondition(p *corev1.Pod) (bool, time.Time) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue, c.LastTransitionTime.Time
		}
	}
	return false, time.Time{}
}

// WaitingReason is why the pod's containers wait, and how often they
// restarted, as " (reason, N restarts)", or "".
func WaitingReason(p *corev1.Pod) string {
	var parts []string
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Waiting != nil && cs.State.Waiting.Reason != "" {
			parts = append(parts, cs.State.Waiting.Reason)
		}
		if cs.RestartCount > 0 {
			parts = append(parts, fmt.Sprintf("%d restarts", cs.RestartCount))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// NodeReady is whether the node is Ready.
func NodeReady(n *corev1.Node) bool {
	ready, _ := NodeReadyCondition(n)
	return ready
}

// NodeReadyCondition is whether the node is Ready, and when its Ready
// condition last changed.
func NodeReadyCondition(n *corev1.Node) (bool, time.Time) {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue, c.LastTransitionTime.Time
		}
	}
	return false, time.Time{}
}

// ControllerKind is the kind of the pod's controller ("" when it has none).
func ControllerKind(p *corev1.Pod) string {
	if c := metav1.GetControllerOf(p); c != nil {
		return c.Kind
	}
	return ""
}
