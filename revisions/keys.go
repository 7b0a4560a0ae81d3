package revisions

import "fmt"

// Keys nodewise writes or reads while migrating.
const (
	// AnnotationRestartedAt is the pod-template annotation `kubectl rollout
	// restart` sets; nodewise stamps the value recorded in the namespace's status.
	AnnotationRestartedAt = "kubectl.kubernetes.io/restartedAt"
	// AnnotationResumeToken on a RevisionMigration is set by `nodewise
	// revision resume` (the key NodeRollouts use); a value the status has not
	// acknowledged (status.resumeToken) clears a halt.
	AnnotationResumeToken = "nodewise.io/resume-token"
	// LeaseName is the RevisionMigration controller's Lease, in the
	// orchestrator's namespace beside the NodeRollout controller's.
	LeaseName = "nodewise-revisions"
	// FieldManager names every write of the RevisionMigration controller
	// to objects it does not own (namespace labels, workload restarts, tag
	// webhooks and Services) in managedFields: a fixed name,
	// so GitOps tools can trust it (Argo CD's managedFieldsManagers,
	// deploy/argocd/argocd-cm.yaml).
	FieldManager = "nodewise-revisions"
)

// PausePatch is the merge patch that pauses a migration before its next wave.
func PausePatch() []byte { return []byte(`{"spec":{"paused":true}}`) }

// ResumePatch is the merge patch `nodewise revision resume` sends: unpause,
// and a new resume token (which clears a halt).
func ResumePatch(token string) []byte {
	return fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}},"spec":{"paused":false}}`, AnnotationResumeToken, token)
}
