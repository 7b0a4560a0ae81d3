package model

import (
	"encoding/json"
	"fmt"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// Node request verbs (`nodewise retry`, `nodewise skip`).
const (
	VerbRetry = "retry"
	VerbSkip  = "skip"
)

// NodeRequest is a person's request on one node of a NodeRollout, carried by
// the annotation AnnotationNodeRequest until the orchestrator acknowledges
// its Token (AnnotationAckedNodeRequest).
type NodeRequest struct {
	Token  string `json:"token"`
	Verb   string `json:"verb"`
	Node   string `json:"node"`
	Reason string `json:"reason,omitempty"`
	// By is who asked: never the request's own JSON, but the annotation
	// AnnotationNodeRequestBy beside it, which admission holds to the user
	// the API server authenticated (PendingNodeRequest fills it in).
	By string `json:"-"`
}

// PendingNodeRequest is the request in a NodeRollout's annotations not yet
// acknowledged (ok false: none). A request that does not parse is an error.
func PendingNodeRequest(ann map[string]string) (NodeRequest, bool, error) {
	raw := ann[AnnotationNodeRequest]
	if raw == "" {
		return NodeRequest{}, false, nil
	}
	var r NodeRequest
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		return NodeRequest{}, false, fmt.Errorf("annotation %s is not a node request: %w", AnnotationNodeRequest, err)
	}
	r.By = ann[AnnotationNodeRequestBy]
	if r.Token == "" || r.Token == ann[AnnotationAckedNodeRequest] {
		return r, false, nil
	}
	return r, true, nil
}

// RequestRefusal says why verb cannot be done on a node in state st ("" it
// can): a node in flight (cordoned, swapping, soaking) is never skipped or
// retried under its worker; only a Failed node is retried; only a Pending or
// Failed node is skipped.
func RequestRefusal(verb string, st v1alpha1.NodeState) string {
	pending := st == "" || st == v1alpha1.NodePending
	switch {
	case InFlight(st):
		return fmt.Sprintf("it is in flight (%s): it cannot be %s until its step finishes", st, pastTense(verb))
	case verb == VerbRetry && st != v1alpha1.NodeFailed:
		return fmt.Sprintf("it is %s, not Failed: only a failed node is retried", stateName(st))
	case verb == VerbSkip && !pending && st != v1alpha1.NodeFailed:
		return fmt.Sprintf("it is %s: only a Pending or Failed node is skipped", stateName(st))
	case verb != VerbRetry && verb != VerbSkip:
		return fmt.Sprintf("unknown verb %q (retry, skip)", verb)
	}
	return ""
}

func pastTense(verb string) string {
	if verb == VerbSkip {
		return "skipped"
	}
	return "retried"
}

func stateName(st v1alpha1.NodeState) string {
	if st == "" {
		return string(v1alpha1.NodePending)
	}
	return string(st)
}
