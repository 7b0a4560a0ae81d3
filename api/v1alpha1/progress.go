package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The conditions GitOps tools read, set on both kinds from their phase
// beside the kinds' own conditions. They follow kstatus
// (sigs.k8s.io/cli-utils/pkg/kstatus), which Flux uses to wait for applied
// objects. Once status.observedGeneration equals metadata.generation,
// kstatus reads Reconciling True as InProgress (the controller is still
// working towards the spec, or waiting to), Stalled True as Failed (it
// cannot go on until a person acts) and, with neither, Ready True as
// Current (the spec is reached). Ready is also what
// `kubectl wait --for=condition=Ready` waits for.
const (
	ConditionReady       = "Ready"
	ConditionReconciling = "Reconciling"
	ConditionStalled     = "Stalled"
)

// Progress is what a phase tells a GitOps tool: which one of the three
// conditions is True.
type Progress int

const (
	// ProgressReconciling: under way, or waiting (to start, for a window,
	// for another rollout, paused by a person, aborting).
	ProgressReconciling Progress = iota
	// ProgressStalled: nothing more happens until a person acts (halted,
	// invalid, refused, aborted).
	ProgressStalled
	// ProgressReady: the spec is reached (completed, rolled back, succeeded).
	ProgressReady
)

// Progress is what phase p tells a GitOps tool. An aborted rollout is
// stalled, not ready: it stopped between two versions for good (an abort
// cannot be undone), and only a person's next step (a rollback, a new
// rollout) moves the fleet on. A paused one is reconciling: kstatus has no
// "suspended", and it waits for a person's resume as it waits for a window.
// An idle standing policy is ready: its last run reached its spec, and the
// next begins by itself.
func (p RolloutPhase) Progress() Progress {
	switch p {
	case PhaseCompleted, PhaseRolledBack, PhaseIdle:
		return ProgressReady
	case PhaseHalted, PhaseFailed, PhaseAborted:
		return ProgressStalled
	}
	return ProgressReconciling
}

// Progress is what phase p tells a GitOps tool, as for a rollout: Aborting
// is still at work (restoring labels, restarting), Aborted is stalled.
func (p MigrationPhase) Progress() Progress {
	switch p {
	case MigrationSucceeded:
		return ProgressReady
	case MigrationHalted, MigrationAborted, MigrationRefused:
		return ProgressStalled
	}
	return ProgressReconciling
}

// SetProgress sets the Ready, Reconciling and Stalled conditions in conds for
// progress p of generation gen at now: the one p names True with reason (the
// phase) and message (why), the others False with the same reason; Ready
// False keeps the message too, since it says why the object is not ready.
// A transition time changes only with a condition's status.
func SetProgress(conds *[]metav1.Condition, p Progress, reason, message string, gen int64, now metav1.Time) {
	if reason == "" {
		reason = "Pending" // a Condition needs a reason: the phase before the first is Pending
	}
	set := func(typ string, on bool, msg string) {
		st := metav1.ConditionFalse
		if on {
			st = metav1.ConditionTrue
		}
		meta.SetStatusCondition(conds, metav1.Condition{Type: typ, Status: st, Reason: reason, Message: msg, ObservedGeneration: gen, LastTransitionTime: now})
	}
	for _, q := range []Progress{ProgressReady, ProgressReconciling, ProgressStalled} {
		msg := message // Ready False says why not, too
		if q != p && q != ProgressReady {
			msg = ""
		}
		set(q.conditionType(), q == p, msg)
	}
}

// FollowPhase sets s's Ready, Reconciling and Stalled conditions from its
// phase unless they already say it: for a writer that sets the phase alone
// (a node worker's halt, a node request ending one), until the
// orchestrator's next pass sets them with its reason. The halt reason is
// the message of a halt; other phases have none until then.
func (s *NodeRolloutStatus) FollowPhase(now metav1.Time) {
	if s.Phase == "" {
		return
	}
	p, msg := s.Progress()
	if c := meta.FindStatusCondition(s.Conditions, p.conditionType()); c != nil && c.Status == metav1.ConditionTrue && c.Reason == string(s.Phase) {
		return
	}
	SetProgress(&s.Conditions, p, string(s.Phase), msg, s.ObservedGeneration, now)
}

// ConditionOnDelete is True while every target DaemonSet of a NodeRollout
// uses updateStrategy OnDelete; False names the ones that do not and the
// fix. No node starts meanwhile.
const ConditionOnDelete = "OnDelete"

// ConditionPrechecked is False (reason PrecheckFailed) while nodewise
// precheck's checks hold a NodeRollout before its first node, its message
// one clause per error finding; True once the rollout has started past a
// hold. No node starts meanwhile.
const ConditionPrechecked = "Prechecked"

// Progress is what s tells a GitOps tool, and the message it has to say
// why: its phase's (the halt reason for a halt), but Stalled while a
// target is off OnDelete (condition OnDelete False, its message), which
// only a person puts right.
func (s *NodeRolloutStatus) Progress() (Progress, string) {
	if c := meta.FindStatusCondition(s.Conditions, ConditionOnDelete); c != nil && c.Status == metav1.ConditionFalse {
		return ProgressStalled, c.Message
	}
	if s.Phase == PhaseHalted {
		return ProgressStalled, s.HaltReason
	}
	return s.Phase.Progress(), ""
}

// conditionType is the condition that is True at progress p.
func (p Progress) conditionType() string {
	return [...]string{ProgressReconciling: ConditionReconciling, ProgressStalled: ConditionStalled, ProgressReady: ConditionReady}[p]
}
