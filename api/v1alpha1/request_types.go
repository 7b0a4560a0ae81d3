package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// VerbRequest is the last request of one verb on a NodeRollout (pause,
// resume, abort, rollback, skip or retry): who asked and when the
// orchestrator took it in.
type VerbRequest struct {
	// Verb is pause, resume, abort, rollback, skip or retry.
	// +kubebuilder:validation:Enum=pause;resume;abort;rollback;skip;retry
	Verb string `json:"verb"`
	// By is who asked: the user the API server authenticated. The admission
	// policy nodewise-verb-requester holds the verb's annotation
	// (nodewise.io/paused-by, resumed-by, aborted-by, rolled-back-by,
	// node-request-by) to that user whenever the verb's field changes.
	By string `json:"by"`
	// At is when the orchestrator took the request in (its clock).
	At metav1.Time `json:"at"`
	// Node is the node a skip or retry named.
	// +optional
	Node string `json:"node,omitempty"`
	// Token is the request's token (resume, skip, retry): each is recorded once.
	// +optional
	Token string `json:"token,omitempty"`
	// Generation is the rollout's metadata.generation when it was recorded:
	// a pause recorded after the last resume is a new one.
	// +optional
	Generation int64 `json:"generation,omitempty"`
}
