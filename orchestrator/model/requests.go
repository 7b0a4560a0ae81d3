package model

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// Rollout-wide verbs (`nodewise pause`, `resume`, `abort`, `rollback`).
const (
	VerbPause    = "pause"
	VerbResume   = "resume"
	VerbAbort    = "abort"
	VerbRollback = "rollback"
)

// DueRequests are the requests on nr that its status.requests does not
// record yet, each naming who asked (the verb's nodewise.io/*-by
// annotation, which the admission policy nodewise-verb-requester holds to
// the user the API server authenticated) and stamped at now. A verb without
// that annotation (a rollout created paused, or a write where the policy is
// not installed) names no one and is left out. It is pure.
//
// A request is new when its token is (resume, skip, retry), or when its
// field is on and its annotation names someone else than the record does;
// a pause is also new once a resume was recorded after the last pause, and
// a resume (unpausing) once a pause was recorded after the last resume.
func DueRequests(nr *v1alpha1.NodeRollout, now metav1.Time) []v1alpha1.VerbRequest {
	ann := nr.Annotations
	last := map[string]v1alpha1.VerbRequest{}
	for _, r := range nr.Status.Requests {
		last[r.Verb] = r
	}
	var due []v1alpha1.VerbRequest
	add := func(verb, key, node, token string) {
		due = append(due, v1alpha1.VerbRequest{Verb: verb, By: ann[key], At: now, Node: clip(node, 253), Token: clip(token, 64), Generation: nr.Generation})
	}
	// newBy: the verb's field is on and its annotation names someone the
	// record does not (or there is no record).
	newBy := func(verb, key string, field bool) bool {
		r, ok := last[verb]
		return field && ann[key] != "" && (!ok || r.By != ann[key])
	}
	// since: verb b was recorded at or after verb a's last record.
	since := func(a, b string) bool {
		ra, okA := last[a]
		rb, okB := last[b]
		return okA && okB && rb.Generation >= ra.Generation
	}
	paused := nr.Spec.Paused
	if newBy(VerbPause, AnnotationPausedBy, paused) || (paused && ann[AnnotationPausedBy] != "" && since(VerbPause, VerbResume) && last[VerbResume].Generation != last[VerbPause].Generation) {
		add(VerbPause, AnnotationPausedBy, "", "")
	}
	token := ann[AnnotationResumeToken]
	_, resumedOnce := last[VerbResume]
	switch {
	case ann[AnnotationResumedBy] == "":
	case token != "" && clip(token, 64) != last[VerbResume].Token,
		newBy(VerbResume, AnnotationResumedBy, !paused),
		!paused && resumedOnce && since(VerbResume, VerbPause):
		add(VerbResume, AnnotationResumedBy, "", token)
	}
	if newBy(VerbAbort, AnnotationAbortedBy, nr.Spec.Abort) {
		add(VerbAbort, AnnotationAbortedBy, "", "")
	}
	if newBy(VerbRollback, AnnotationRolledBackBy, nr.Spec.Rollback) {
		add(VerbRollback, AnnotationRolledBackBy, "", "")
	}
	if r, pending, err := PendingNodeRequest(ann); err == nil && pending && r.By != "" && (r.Verb == VerbSkip || r.Verb == VerbRetry) &&
		clip(r.Token, 64) != last[r.Verb].Token {
		add(r.Verb, AnnotationNodeRequestBy, r.Node, r.Token)
	}
	return due
}

// RequestLine is what a recorded request says in its Event:
// "pause requested by alice", "skip of node node-3 requested by bob".
func RequestLine(r v1alpha1.VerbRequest) string {
	what := r.Verb
	if r.Node != "" {
		what += " of node " + r.Node
	}
	return what + " requested by " + r.By
}

// RequestReason is the Event reason of a verb's request (PauseRequested, ...).
func RequestReason(verb string) string {
	if verb == "" {
		return "Requested"
	}
	return strings.ToUpper(verb[:1]) + verb[1:] + "Requested"
}

// clip cuts s to at most n bytes: a token or node name is copied into
// status, and the annotation it comes from is the client's.
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// ResumeRequested says `nodewise resume` asked to clear a halt (the annotations'
// resume token), and no pass has acknowledged it yet.
func ResumeRequested(ann map[string]string) bool {
	return ann[AnnotationResumeToken] != "" && ann[AnnotationResumeToken] != ann[AnnotationAckedResumeToken]
}
