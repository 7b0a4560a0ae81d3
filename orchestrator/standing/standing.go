// Package standing is a standing policy's life across its runs
// (spec.standing): when an idle policy plans again, when a new run begins,
// the bounded run history in status, and its one-line summary. It is pure:
// it reads and changes only what it is given.
package standing

import (
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// Wake says why an idle standing policy plans again, "" when it stays
// idle: a target whose newest revision is not the one its last run rolled
// (the next run), or a target gone or off OnDelete (the plan refuses to
// start, saying so in status). A target whose controller has not observed
// its template yet keeps it idle: the DaemonSet's next event wakes it.
func Wake(s v1alpha1.NodeRolloutStatus, targets []model.TargetView) string {
	for _, t := range targets {
		switch {
		case !t.Found:
			return "DaemonSet " + t.Key() + " not found"
		case t.Strategy != appsv1.OnDeleteDaemonSetStrategyType:
			return fmt.Sprintf("DaemonSet %s uses updateStrategy %s", t.Key(), t.Strategy)
		case !t.Settled:
			continue
		}
		if rolled := rolledRevision(s.Targets, t.Ref); rolled != t.NewestHash {
			return fmt.Sprintf("DaemonSet %s has revision %s; the last run rolled %s", t.Key(), t.NewestHash, orNone(rolled))
		}
	}
	return ""
}

// Phase is the phase a pass records for the plan's phase: a standing
// policy whose run completed is Idle, watching for the next revision.
func Phase(spec v1alpha1.NodeRolloutSpec, planned v1alpha1.RolloutPhase) v1alpha1.RolloutPhase {
	if spec.Standing && planned == v1alpha1.PhaseCompleted {
		return v1alpha1.PhaseIdle
	}
	return planned
}

// Begin starts a new run in s when the policy is standing, the plan goes
// ahead (planned is neither Pending nor Failed: the targets are valid),
// and no run is under way whose revisions differ from the targets' newest:
// its first run, or the one after a finished run of other revisions. The
// run's times and halt reason start afresh, and its record heads s.Runs
// (at most v1alpha1.MaxRuns kept). It says whether a run began.
func Begin(s *v1alpha1.NodeRolloutStatus, spec v1alpha1.NodeRolloutSpec, planned v1alpha1.RolloutPhase, targets []model.TargetView, now metav1.Time) bool {
	if planned == v1alpha1.PhasePending || planned == v1alpha1.PhaseFailed || !Due(*s, spec, targets) {
		return false
	}
	n := int64(1)
	if len(s.Runs) > 0 {
		n = s.Runs[0].Run + 1
	}
	s.StartTime, s.CompletionTime, s.HaltReason = nil, nil, ""
	run := v1alpha1.RunRecord{Run: n, Targets: revisions(targets), Outcome: planned, StartTime: now}
	s.Runs = append([]v1alpha1.RunRecord{run}, s.Runs...)
	if len(s.Runs) > v1alpha1.MaxRuns {
		s.Runs = s.Runs[:v1alpha1.MaxRuns]
	}
	return true
}

// Due says a standing policy's next run is due on targets: it has had
// none, or its last one ended and rolled other revisions. Until its first
// node starts, such a run is a new rollout (promotion holds it, a missing
// canary is a mistake in the spec).
func Due(s v1alpha1.NodeRolloutStatus, spec v1alpha1.NodeRolloutSpec, targets []model.TargetView) bool {
	if !spec.Standing {
		return false
	}
	if len(s.Runs) == 0 {
		return true
	}
	return Ended(s.Runs[0].Outcome) && !sameRevisions(s.Runs[0].Targets, revisions(targets))
}

// Note brings the current run's record (s.Runs[0], unless it ended) to
// s as a pass left it: its outcome (Completed once the policy is Idle),
// the halt reason or else why (the plan's reason), the revisions it rolls
// (s.targets, which a halt keeps), and when it ended.
func Note(s *v1alpha1.NodeRolloutStatus, why string, now metav1.Time) {
	if len(s.Runs) == 0 || Ended(s.Runs[0].Outcome) {
		return
	}
	r := &s.Runs[0]
	r.Outcome = s.Phase
	if r.Outcome == v1alpha1.PhaseIdle {
		r.Outcome = v1alpha1.PhaseCompleted
	}
	r.Reason = s.HaltReason
	if r.Reason == "" {
		r.Reason = why
	}
	if len(r.Reason) > 1024 {
		r.Reason = r.Reason[:1021] + "..."
	}
	if len(s.Targets) > 0 && s.Phase != v1alpha1.PhaseHalted && s.Phase != v1alpha1.PhasePending {
		r.Targets = slices.Clone(s.Targets)
	}
	if Ended(r.Outcome) {
		end := now
		if s.CompletionTime != nil {
			end = *s.CompletionTime
		}
		r.CompletionTime = &end
	}
}

// Ended says a run in this outcome is over: completed, or aborted (which
// ends the policy too: an abort cannot be undone).
func Ended(outcome v1alpha1.RolloutPhase) bool {
	return outcome == v1alpha1.PhaseCompleted || outcome == v1alpha1.PhaseAborted
}

// Summary is a standing policy's one line for `nodewise status` and
// `plan`: that it stands, and its last runs, newest first ("" for a
// one-shot rollout).
func Summary(nr *v1alpha1.NodeRollout, now time.Time) string {
	if !nr.Spec.Standing && len(nr.Status.Runs) == 0 {
		return ""
	}
	line := "standing: rolls each new revision of its targets"
	if !nr.Spec.Standing {
		line = "standing: off"
	}
	if len(nr.Status.Runs) == 0 {
		return line + "; no run yet"
	}
	var runs []string
	for _, r := range nr.Status.Runs[:min(3, len(nr.Status.Runs))] {
		at := r.StartTime.Time
		if r.CompletionTime != nil {
			at = r.CompletionTime.Time
		}
		runs = append(runs, fmt.Sprintf("#%d %s %s %s ago", r.Run, r.Outcome, revisionsLine(r.Targets), now.Sub(at).Round(time.Second)))
	}
	return line + "; runs: " + strings.Join(runs, ", ")
}

// revisionsLine names a run's revisions, "ztunnel@5d8f, istio-cni-node@7c9a".
func revisionsLine(ts []v1alpha1.TargetStatus) string {
	parts := make([]string, 0, len(ts))
	for _, t := range ts {
		parts = append(parts, t.Name+"@"+orNone(t.Revision))
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// revisions are the targets' newest revisions and images, as a run records them.
func revisions(targets []model.TargetView) []v1alpha1.TargetStatus {
	out := make([]v1alpha1.TargetStatus, 0, len(targets))
	for _, t := range targets {
		out = append(out, v1alpha1.TargetStatus{Namespace: t.Ref.Namespace, Name: t.Ref.Name, Revision: t.NewestHash, Images: slices.Clone(t.Images)})
	}
	return out
}

// sameRevisions: a and b name the same targets at the same revisions.
func sameRevisions(a, b []v1alpha1.TargetStatus) bool {
	return slices.EqualFunc(a, b, func(x, y v1alpha1.TargetStatus) bool {
		return x.Namespace == y.Namespace && x.Name == y.Name && x.Revision == y.Revision
	})
}

// rolledRevision is the revision status.targets records for ref ("" when none).
func rolledRevision(ts []v1alpha1.TargetStatus, ref v1alpha1.TargetRef) string {
	for _, t := range ts {
		if t.Namespace == ref.Namespace && t.Name == ref.Name {
			return t.Revision
		}
	}
	return ""
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
