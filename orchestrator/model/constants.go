package model

// Every label and annotation key nodewise's orchestrator reads or writes. The
// table in docs/orchestrator.md lists the same keys; keep them in step.
const (
	// AnnotationRollout on a Node names the NodeRollout that owns its in-flight step.
	AnnotationRollout = "nodewise.io/rollout"
	// AnnotationRolloutUID on a Node is that NodeRollout's UID, so a recreated
	// rollout with the same name never resumes a stale step.
	AnnotationRolloutUID = "nodewise.io/rollout-uid"
	// AnnotationStep on a Node is the step about to be acted on (a NodeState).
	// It is written before the step acts, so a successor resumes it.
	AnnotationStep = "nodewise.io/step"
	// AnnotationStepSince on a Node is when AnnotationStep was written (RFC 3339).
	AnnotationStepSince = "nodewise.io/step-since"
	// AnnotationSoakSince on a Node is when its soak began (RFC 3339): the gate's window start.
	AnnotationSoakSince = "nodewise.io/soak-since"
	// AnnotationSwapSince on a Node is when it was cordoned (RFC 3339): the end
	// of its baseline window and the start of the swap, for the gate.
	AnnotationSwapSince = "nodewise.io/swap-since"
	// AnnotationDrainedAt on a Node is when a drain of it finished (RFC 3339),
	// written with the step after Drain. A value at or after AnnotationSwapSince
	// means this attempt drained the node; otherwise it was swapped in place.
	AnnotationDrainedAt = "nodewise.io/drained-at"
	// AnnotationDrainDecision on a Node is drain policy auto's choice for it,
	// "drain" or "in-place", written (with AnnotationDrainDecidedAt) before the
	// Drain step acts, so a successor after a crash makes the same choice.
	AnnotationDrainDecision = "nodewise.io/drain-decision"
	// AnnotationDrainDecidedAt on a Node is when AnnotationDrainDecision was
	// written (RFC 3339); one older than the Drain step's start belongs to an
	// earlier attempt and is decided again.
	AnnotationDrainDecidedAt = "nodewise.io/drain-decided-at"
	// AnnotationPriorUnschedulable on a Node is "true" or "false": whether the node
	// was already cordoned when nodewise first touched it. Written once, before the
	// cordon; nodewise uncordons only nodes where it is "false".
	AnnotationPriorUnschedulable = "nodewise.io/prior-unschedulable"
	// AnnotationCordonedBy on a Node says nodewise set spec.unschedulable (value: rollout name).
	AnnotationCordonedBy = "nodewise.io/cordoned-by"
	// AnnotationKeepCordoned on a Node is set by a person (any value, a
	// reason): nodewise's uncordon leaves the node cordoned. A `kubectl
	// cordon` of a node nodewise has cordoned changes nothing the API can
	// show, so this is how to keep it cordoned. nodewise never writes it.
	AnnotationKeepCordoned = "nodewise.io/keep-cordoned"
	// AnnotationSwappedPrefix + target name on a Node is the UID of the old pod
	// nodewise deleted for that target, so a resumed swap never deletes twice.
	AnnotationSwappedPrefix = "swapped.nodewise.io/"
	// LabelSurgeBridge on a Pod marks a pod nodewise created as a surge
	// bridge for the DaemonSet it names (orchestrator/swap/surge.go). It stays on
	// the pod once the DaemonSet has adopted it: a bridge is one while its
	// controller is a Pod (its anchor).
	LabelSurgeBridge = "nodewise.io/surge-bridge"
	// LabelPrepull on a Pod marks a pre-pull pod nodewise created for the
	// NodeRollout it names (orchestrator/prepull); it is deleted once its
	// node has started.
	LabelPrepull = "nodewise.io/prepull"
	// LabelPrepullTarget on a pre-pull pod names the target DaemonSet whose
	// images it pulls (one pod per target): the chart's admission policy
	// nodewise-prepull-only checks the pod against that DaemonSet's template.
	LabelPrepullTarget = "nodewise.io/prepull-target"
	// FinalizerReleaseNodes on a NodeRollout that has started a node: its
	// deletion makes every in-flight node safe (as an abort does) before the
	// object goes (fleet.Pass.HoldsNodes).
	FinalizerReleaseNodes = "nodewise.io/release-nodes"
	// AnnotationResumeToken on a NodeRollout is set by `nodewise resume`; a new
	// value clears a halt (the failed nodes are retried from preflight).
	AnnotationResumeToken = "nodewise.io/resume-token"
	// AnnotationAckedResumeToken on a NodeRollout is the last resume token the
	// orchestrator acted on.
	AnnotationAckedResumeToken = "nodewise.io/acked-resume-token"
	// AnnotationNodeRequest on a NodeRollout is set by `nodewise retry` and
	// `nodewise skip`: one request on one node, as JSON (NodeRequest); the
	// orchestrator acts on a request whose token it has not acknowledged.
	AnnotationNodeRequest = "nodewise.io/node-request"
	// AnnotationAckedNodeRequest on a NodeRollout is the token of the last
	// node request the orchestrator acted on (or refused).
	AnnotationAckedNodeRequest = "nodewise.io/acked-node-request"
	// AnnotationPausedBy, AnnotationResumedBy, AnnotationAbortedBy,
	// AnnotationRolledBackBy and AnnotationNodeRequestBy on a NodeRollout
	// name who asked for its verb (pause, resume, abort, rollback, and skip
	// or retry): the user the API server authenticated, which the admission
	// policy nodewise-verb-requester requires each to be whenever its verb's
	// field changes, and which nobody may write otherwise. The orchestrator
	// copies them into status.requests with an Event (model.DueRequests).
	AnnotationPausedBy      = "nodewise.io/paused-by"
	AnnotationResumedBy     = "nodewise.io/resumed-by"
	AnnotationAbortedBy     = "nodewise.io/aborted-by"
	AnnotationRolledBackBy  = "nodewise.io/rolled-back-by"
	AnnotationNodeRequestBy = "nodewise.io/node-request-by"

	// LabelZone is the well-known zone label the planner groups nodes by.
	LabelZone = "topology.kubernetes.io/zone"
	// LabelControllerRevisionHash is set by the DaemonSet controller on each pod
	// and ControllerRevision; a node is done when its pods carry the newest one.
	LabelControllerRevisionHash = "controller-revision-hash"

	// LeaseName is the leader-election Lease in the orchestrator's namespace.
	LeaseName = "nodewise-orchestrator"
	// FieldManager is the server-side field manager of every orchestrator write.
	FieldManager = "nodewise-orchestrator"
)
