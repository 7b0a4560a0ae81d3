package podage

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio/freshness"
)

// Contract is what a policy promises to do, one Markdown bullet a line,
// for `nodewise freshness --contract`: its targets, where, when, how fast,
// how owners are told and how a workload opts out. It is pure.
func Contract(p v1alpha1.PodAgePolicy) []string {
	pol, err := parse(p.Spec)
	if err != nil {
		return []string{fmt.Sprintf("**PodAgePolicy %s is not enforced:** %v.", p.Name, err)}
	}
	var target []string
	if pol.maxAge > 0 {
		target = append(target, "a pod older than "+freshness.Human(pol.maxAge))
	}
	if pol.maxMinorsBehind != noLag {
		target = append(target, fmt.Sprintf("a proxy more than %d minor%s behind the designated version", pol.maxMinorsBehind, plural(pol.maxMinorsBehind)))
	}
	where := "every namespace with sidecar pods"
	if s := p.Spec.NamespaceSelector; s != nil {
		if sel, err := metav1.LabelSelectorAsSelector(s); err == nil {
			where = "the namespaces matching `" + sel.String() + "`"
		}
	}
	when := "at any time"
	if len(pol.windows) > 0 {
		when = "only inside its maintenance windows (" + pol.Windows() + ")"
	}
	if n := len(pol.blackouts); n > 0 {
		when += fmt.Sprintf(", never in its %d blackout%s", n, plural(n))
	}
	nsRate := p.Spec.RateLimit.NamespacePodsPerSecond
	if nsRate == 0 {
		nsRate = p.Spec.RateLimit.PodsPerSecond
	}
	state := string(p.Status.Phase)
	if state == "" {
		state = "not yet reconciled"
	}
	return []string{
		fmt.Sprintf("**Enforced by PodAgePolicy %s** (%s): in %s, a workload with %s is restarted %s.", p.Name, state, where, strings.Join(target, " or "), when),
		fmt.Sprintf("**How:** through its own rollout restart (Deployment, StatefulSet, DaemonSet) only when its PodDisruptionBudgets allow it, else by eviction through the Eviction API; at most %d pods a second cluster-wide and %d in one namespace; in waves of at most %d workloads, each judged by the node agents before the next; a failed wave halts the policy until `nodewise podage resume %s`.",
			p.Spec.RateLimit.PodsPerSecond, nsRate, pol.waveSize, p.Name),
		fmt.Sprintf("**Notice:** the owning team is told through its own route (the `%s` label or annotation names the team) at least %s before its workload is restarted.", teamKey(pol), freshness.Human(pol.notice)),
		fmt.Sprintf("**Opting out:** annotate the workload `%s: <RFC 3339 time>`; it is left alone until then, recorded in the policy's status and counted in `nodewise freshness`.", v1alpha1.AnnotationMaxAgeOptOutUntil),
	}
}

func teamKey(p policy) string {
	if p.keys.Team == "" {
		return freshness.DefaultTeamKey
	}
	return p.keys.Team
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
