package nodestep

import (
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// DefaultZtunnelGrace is Kubernetes' default terminationGracePeriodSeconds.
const DefaultZtunnelGrace = 30 * time.Second

// SwappedInPlace decides, from persisted facts only, whether ztunnel was
// swapped on a node without draining it first: it was when the rollout swaps
// ztunnel and either the policy never drains or no finished drain was
// recorded since this attempt's cordon (swapStart). A drain record older than
// the cordon belongs to an earlier attempt (a retry after resume).
func SwappedInPlace(policy v1alpha1.DrainPolicy, swapsZtunnel bool, drainedAt, swapStart time.Time) bool {
	if !swapsZtunnel {
		return false // ztunnel keeps running: nothing is reset as planned
	}
	if policy == v1alpha1.DrainNever || drainedAt.IsZero() {
		return true
	}
	return drainedAt.Before(swapStart)
}

// ZtunnelGrace is the termination grace period of a ztunnel DaemonSet's pod
// template (default 30 s); ztunnel's drain deadline is derived from it.
func ZtunnelGrace(ds *appsv1.DaemonSet) time.Duration {
	if ds == nil || ds.Spec.Template.Spec.TerminationGracePeriodSeconds == nil {
		return DefaultZtunnelGrace
	}
	return time.Duration(*ds.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
}
