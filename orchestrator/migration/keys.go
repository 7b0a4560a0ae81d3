package migration

// Keys nodewise writes or reads while migrating.
const (
	// AnnotationRestartedAt is the pod-template annotation `kubectl rollout
	// restart` sets; nodewise stamps the value recorded in the namespace's status.
	AnnotationRestartedAt = "kubectl.kubernetes.io/restartedAt"
	// LabelRev is the namespace label moved between tag and original revision.
	LabelRev = "istio.io/rev"
)
