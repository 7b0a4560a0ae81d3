package podage

import (
	"fmt"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// Schedule is what p will do to team's workloads that missed its target,
// as a team lead reads it on the freshness page: how many the policy will
// restart, from when (the first notice to run out, moved to the next open
// window past any blackout) and in which windows; "" when nothing of the
// team's waits for a restart. It is pure.
func Schedule(p v1alpha1.PodAgePolicy, team string, now time.Time) string {
	pol, err := parse(p.Spec)
	if err != nil {
		return ""
	}
	n := 0
	var from time.Time
	for _, r := range p.Status.Workloads {
		if r.Team != team || (r.State != v1alpha1.WorkloadNoticed && r.State != v1alpha1.WorkloadBlocked) {
			continue
		}
		at := now
		if r.NoticeSentAt != nil && r.NoticeSentAt.Add(pol.notice).After(now) {
			at = r.NoticeSentAt.Add(pol.notice)
		}
		if n == 0 || at.Before(from) {
			from = at
		}
		n++
	}
	if n == 0 {
		return ""
	}
	when := "from " + from.UTC().Format("2006-01-02 15:04 UTC")
	if _, next := pol.open(from); next.IsZero() {
		when = "when a window opens (none ever does)"
	} else if next.After(from) {
		when = "from " + next.UTC().Format("2006-01-02 15:04 UTC")
	}
	s := fmt.Sprintf("the platform will restart %d workload%s %s", n, plural(n), when)
	if len(pol.windows) > 0 {
		s += ", within its windows: " + pol.Windows()
	}
	s += " (PodAgePolicy " + p.Name + ")"
	switch {
	case p.Spec.Abort != "":
		s += "; the policy is aborted"
	case p.Status.Phase == v1alpha1.PodAgeHalted:
		s += "; the policy is halted: " + p.Status.Reason
	case p.Spec.Paused:
		s += "; the policy is paused"
	}
	return s
}
