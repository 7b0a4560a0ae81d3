package nodestep

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/kubectl/pkg/drain"
)

// LabelPartOf marks nodewise's own pods (the chart and deploy/ set it on
// every pod template). Read only: a drain never evicts such a pod in
// nodewise's own namespace, so the leader is never evicted mid-soak by
// its own drain (the PodDisruptionBudget guards against everyone else's).
const LabelPartOf = "app.kubernetes.io/part-of"

// SkipOwnPods is a drain filter that skips the pods of nodewise itself
// (namespace ns, LabelPartOf=nodewise): the orchestrator's replicas and the
// revisions controller. The agents are DaemonSet pods, already skipped.
func SkipOwnPods(ns string) drain.PodFilter {
	return func(p corev1.Pod) drain.PodDeleteStatus {
		if p.Namespace == ns && p.Labels[LabelPartOf] == "nodewise" {
			return drain.MakePodDeleteStatusSkip()
		}
		return drain.MakePodDeleteStatusOkay()
	}
}
