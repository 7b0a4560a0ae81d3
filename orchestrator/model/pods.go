package model

import (
	"time"

	corev1 "k8s.io/api/core/v1"
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
