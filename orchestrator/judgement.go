package orchestrator

import (
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
)

// maxJudgementRows matches the CRD's MaxItems on status.nodes[].judgement.rows;
// the judge writes fewer (node rows plus health.MaxSummaryPodRows), and a
// longer summary is cut rather than make the status write fail.
const maxJudgementRows = 64

// defaultZtunnelGrace is Kubernetes' default terminationGracePeriodSeconds.
const defaultZtunnelGrace = 30 * time.Second

// judgementOf copies the judge's summary into its status form (same JSON
// field names, so `nodewise explain` reads it back as a health.Summary).
func judgementOf(s *health.Summary) *v1alpha1.NodeJudgement {
	if s == nil {
		return nil
	}
	j := &v1alpha1.NodeJudgement{
		Judgements:             s.Judgements,
		ConsecutiveFailures:    s.ConsecutiveFailures,
		ConsecutiveQueryErrors: s.ConsecutiveQueryErrors,
		IntervalOutcome:        string(s.IntervalOutcome),
		BaselineSeconds:        s.BaselineSeconds,
		SoakSeconds:            s.SoakSeconds,
		PodsCompared:           s.PodsCompared,
		PodsNotCompared:        s.PodsNotCompared,
		Tests:                  s.Tests,
		Regressions:            s.Regressions,
		PlannedResets:          s.PlannedResets,
		JudgedAt:               s.JudgedAt,
	}
	for i, r := range s.Rows {
		if i == maxJudgementRows {
			break
		}
		j.Rows = append(j.Rows, v1alpha1.JudgementRow{Pod: r.Pod, Metric: string(r.Metric), Before: r.Before, After: r.After,
			P: r.P, Regressed: r.Regressed, Note: r.Note})
	}
	return j
}

// swappedInPlace decides, from persisted facts only, whether ztunnel was
// swapped on a node without draining it first: it was when the rollout swaps
// ztunnel and either the policy never drains or no finished drain was
// recorded since this attempt's cordon (swapStart). A drain record older than
// the cordon belongs to an earlier attempt (a retry after resume).
func swappedInPlace(policy v1alpha1.DrainPolicy, swapsZtunnel bool, drainedAt, swapStart time.Time) bool {
	if !swapsZtunnel {
		return false // ztunnel keeps running: nothing is reset as planned
	}
	if policy == v1alpha1.DrainNever || drainedAt.IsZero() {
		return true
	}
	return drainedAt.Before(swapStart)
}

// ztunnelGrace is the termination grace period of a ztunnel DaemonSet's pod
// template (default 30 s); ztunnel's drain deadline is derived from it.
func ztunnelGrace(ds *appsv1.DaemonSet) time.Duration {
	if ds == nil || ds.Spec.Template.Spec.TerminationGracePeriodSeconds == nil {
		return defaultZtunnelGrace
	}
	return time.Duration(*ds.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
}
