package planner

import (
	"fmt"
	"strings"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// ActSkip ends a node that has not started as Skipped, with the reason in
// status and an Event: a node NotReady longer than spec.notReadyTimeout.
const ActSkip ActionKind = "Skip"

// notReadyExpired says why a node not yet started is skipped: it has been
// NotReady longer than the policy's limit ("" while it may still come
// back, or with no limit: then it waits, notReadyWaits).
func notReadyExpired(n model.NodeView, p model.Policy, now time.Time) string {
	if p.NotReadyTimeout <= 0 || !notReadyWaits(n) || n.NotReadySince.IsZero() {
		return ""
	}
	gone := now.Sub(n.NotReadySince)
	if gone < p.NotReadyTimeout {
		return ""
	}
	return fmt.Sprintf("NotReady since %s (%s), longer than notReadyTimeout %s", n.NotReadySince.UTC().Format(time.RFC3339), gone.Round(time.Second), p.NotReadyTimeout)
}

// skippedSummary names the order's Skipped nodes and why (the status
// reason, or the reason of the skip planned now), for the phase reason.
func skippedSummary(skipped []string, why map[string]string, status v1alpha1.NodeRolloutStatus) string {
	if len(skipped) == 0 {
		return ""
	}
	reasons := map[string]string{}
	for _, ns := range status.Nodes {
		reasons[ns.Name] = ns.Reason
	}
	parts := make([]string, 0, len(skipped))
	for _, n := range skipped {
		r := why[n]
		if r == "" {
			r = reasons[n]
		}
		if r == "" {
			parts = append(parts, n)
			continue
		}
		parts = append(parts, n+": "+r)
	}
	return fmt.Sprintf("%d skipped (%s)", len(skipped), strings.Join(parts, "; "))
}
