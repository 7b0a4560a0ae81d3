package nodestep

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// TestGateDrainFacts is the table behind GateInput.SwappedInPlace and
// GateInput.ZtunnelGrace.
func TestGateDrainFacts(t *testing.T) {
	cordon := time.Date(2026, 11, 30, 5, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name         string
		policy       v1alpha1.DrainPolicy
		swapsZtunnel bool
		drainedAt    time.Time
		want         bool
	}{
		{"never drains: in place", v1alpha1.DrainNever, true, time.Time{}, true},
		{"never, even with a drain record from an earlier policy", v1alpha1.DrainNever, true, cordon.Add(time.Minute), true},
		{"always, drained after this cordon", v1alpha1.DrainAlways, true, cordon.Add(time.Minute), false},
		{"always, drained at the cordon instant", v1alpha1.DrainAlways, true, cordon, false},
		{"auto, drained", v1alpha1.DrainAuto, true, cordon.Add(time.Second), false},
		{"auto, no drain recorded", v1alpha1.DrainAuto, true, time.Time{}, true},
		{"always, only an earlier attempt's drain", v1alpha1.DrainAlways, true, cordon.Add(-time.Hour), true},
		{"ztunnel not a target: nothing reset as planned", v1alpha1.DrainNever, false, time.Time{}, false},
	} {
		if got := SwappedInPlace(tc.policy, tc.swapsZtunnel, tc.drainedAt, cordon); got != tc.want {
			t.Errorf("%s: swappedInPlace = %v, want %v", tc.name, got, tc.want)
		}
	}
	sec := func(n int64) *appsv1.DaemonSet {
		ds := &appsv1.DaemonSet{}
		ds.Spec.Template.Spec.TerminationGracePeriodSeconds = &n
		return ds
	}
	for _, tc := range []struct {
		name string
		ds   *appsv1.DaemonSet
		want time.Duration
	}{
		{"unset: Kubernetes' default", &appsv1.DaemonSet{}, 30 * time.Second},
		{"no DaemonSet", nil, 30 * time.Second},
		{"the chart's value", sec(30), 30 * time.Second},
		{"long grace", sec(300), 5 * time.Minute},
		{"short grace", sec(8), 8 * time.Second},
	} {
		if got := ZtunnelGrace(tc.ds); got != tc.want {
			t.Errorf("%s: ztunnelGrace = %s, want %s", tc.name, got, tc.want)
		}
	}
}
