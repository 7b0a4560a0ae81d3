package revisions

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
	// fieldManager names the controller's writes in managedFields.
	fieldManager = "nodewise-revisions"
)
