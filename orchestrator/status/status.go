// Package status decides what a NodeRollout's status says after a pass: the
// decision's phase, the plan's node list, counts and conditions. It writes
// nothing; write.Status carries the result to the API.
package status

import (
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/planner"
	"github.com/nodewise/nodewise/orchestrator/standing"
)

// Record writes into s what decision d says of rollout nr at now: the
// phase (a halt is cleared only by resume, rollback or abort), start and
// completion times, the targets' revisions, the plan's node list (each entry
// caught up with its node's settled record, given), counts and conditions.
// It is pure: the caller applies it to a copy first, then queues or writes it.
func Record(s *v1alpha1.NodeRolloutStatus, nr *v1alpha1.NodeRollout, d planner.Decision, targets []model.TargetView, settled map[string]v1alpha1.NodeState, now metav1.Time) {
	RecordOnly(s, nr, d, targets, settled, now, nil, nil)
}

// RecordOnly is Record merging the plan into the entries at the positions
// only of d.Order alone (the nodes whose entries may change: those whose
// views changed since the last merge, those held now or then), the counts
// brought along by the entries' changes, when s's entries stand in plan
// order (Aligned); into every entry (Record) when only is nil or they do
// not. An entry it changes goes to put when given (s's entries are then
// left as they are: Preview), else into s.
func RecordOnly(s *v1alpha1.NodeRolloutStatus, nr *v1alpha1.NodeRollout, d planner.Decision, targets []model.TargetView, settled map[string]v1alpha1.NodeState, now metav1.Time, only []int, put func(int, v1alpha1.NodeStatus)) {
	if s.Phase == v1alpha1.PhaseHalted && d.Phase != v1alpha1.PhaseHalted && !model.ResumeRequested(nr.Annotations) && !nr.Spec.Rollback && !nr.Spec.Abort && d.Phase != v1alpha1.PhasePending {
		return // a halt is only cleared by resume, rollback or abort
	}
	standing.Begin(s, nr.Spec, d.Phase, targets, now) // a standing policy's next run
	s.Phase, s.ObservedGeneration = standing.Phase(nr.Spec, d.Phase), nr.Generation
	if d.Phase == v1alpha1.PhaseHalted {
		if s.HaltReason == "" {
			s.HaltReason = d.Reason
		}
	} else {
		s.HaltReason = ""
	}
	if s.StartTime == nil && d.Phase == v1alpha1.PhaseProgressing {
		s.StartTime = &now
	}
	if d.Phase == v1alpha1.PhaseCompleted || d.Phase == v1alpha1.PhaseRolledBack || d.Phase == v1alpha1.PhaseAborted || d.Phase == v1alpha1.PhaseFailed {
		if s.CompletionTime == nil {
			s.CompletionTime = &now
		}
	} else {
		s.CompletionTime = nil
	}
	// status.targets is the revision the rollout moves nodes to; rollback
	// waits until the templates are off it. A halted rollout moves no
	// node, so the old chart re-applied during a halt (as the emergency
	// path goes: halt, re-apply, rollback) must not become that revision.
	if len(targets) > 0 && !nr.Spec.Rollback && d.Phase != v1alpha1.PhasePending && d.Phase != v1alpha1.PhaseHalted && s.Phase != v1alpha1.PhaseHalted {
		s.Targets = s.Targets[:0]
		for _, t := range targets {
			s.Targets = append(s.Targets, v1alpha1.TargetStatus{Namespace: t.Ref.Namespace, Name: t.Ref.Name, Revision: t.NewestHash, Images: t.Images})
		}
	}
	if only != nil && Aligned(*s, d, only) {
		mergeOnly(s, d, settled, now, only, put)
	} else {
		mergeAll(s, d, settled, now)
	}
	setConditions(s, d, targets, nr.Generation, now)
	standing.Note(s, d.Reason, now)
}

// pruneUnplanned drops the Pending entries of nodes the plan no longer has
// (deleted, or relabelled out of the selector, before they started):
// nothing of them is left to show. Entries that started stay, as history.
func pruneUnplanned(nodes []v1alpha1.NodeStatus, order []planner.PlannedNode) []v1alpha1.NodeStatus {
	if len(nodes) == len(order) {
		return nodes // every entry is a planned node's (Record gave each its own)
	}
	planned := make(map[string]bool, len(order))
	for _, pn := range order {
		planned[pn.Name] = true
	}
	kept := make([]v1alpha1.NodeStatus, 0, len(nodes))
	for _, ns := range nodes {
		if planned[ns.Name] || (ns.State != "" && ns.State != v1alpha1.NodePending) {
			kept = append(kept, ns)
		}
	}
	return kept
}

// setConditions sets the Valid, Halted, Complete and OnDelete conditions
// of s, and the Ready, Reconciling and Stalled ones GitOps tools read (from
// the phase, with the halt reason or else the decision's reason as the
// message; Stalled while a target is off OnDelete, which only a person
// puts right).
func setConditions(s *v1alpha1.NodeRolloutStatus, d planner.Decision, targets []model.TargetView, gen int64, now metav1.Time) {
	cond := func(t string, ok bool, reason, msg string) {
		st := metav1.ConditionFalse
		if ok {
			st = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: t, Status: st, Reason: reason, Message: msg, ObservedGeneration: gen, LastTransitionTime: now})
	}
	valid := (d.Phase != v1alpha1.PhasePending || d.Promotion != "" || d.Precheck != "") && d.Phase != v1alpha1.PhaseFailed
	cond("Valid", valid, map[bool]string{true: "Valid", false: "Invalid"}[valid], map[bool]string{true: "", false: d.Reason}[valid])
	if d.Promotion != "" {
		cond("Promoted", false, "WaitingForUpstream", d.Promotion)
	} else if promoted := meta.FindStatusCondition(s.Conditions, "Promoted"); promoted != nil && s.StartTime != nil {
		cond("Promoted", true, "UpstreamCompleted", "")
	}
	if d.Precheck != "" {
		cond(v1alpha1.ConditionPrechecked, false, "PrecheckFailed", d.Precheck)
	} else if pc := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionPrechecked); pc != nil && s.StartTime != nil {
		cond(v1alpha1.ConditionPrechecked, true, "PrecheckPassed", "")
	}
	cond("Halted", s.Phase == v1alpha1.PhaseHalted, string(s.Phase), s.HaltReason)
	cond("Complete", s.Phase == v1alpha1.PhaseCompleted || s.Phase == v1alpha1.PhaseRolledBack || s.Phase == v1alpha1.PhaseIdle, string(s.Phase), "")
	if off := offOnDelete(targets); off != "" {
		cond(v1alpha1.ConditionOnDelete, false, "NotOnDelete", off)
	} else if len(targets) > 0 {
		cond(v1alpha1.ConditionOnDelete, true, "OnDelete", "")
	}
	progress, why := s.Progress()
	if why == "" {
		why = d.Reason
	}
	v1alpha1.SetProgress(&s.Conditions, progress, string(s.Phase), why, gen, now)
}

// offOnDelete names the targets found off OnDelete and the fix ("" when none).
func offOnDelete(targets []model.TargetView) string {
	var off []model.TargetView
	for _, t := range targets {
		if t.Found && t.Strategy != appsv1.OnDeleteDaemonSetStrategyType {
			off = append(off, t)
		}
	}
	if err := planner.ValidateTargets(off); err != nil {
		return planner.OneLine(err)
	}
	return ""
}
