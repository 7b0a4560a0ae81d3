package orchestrator

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/tools/cache"
)

// TestDataPlaneLeavingOnDeleteIsReported: with no rollout at all, a
// data-plane DaemonSet that leaves OnDelete gets a Warning Event and its
// series reads 1; back on OnDelete it reads 0, with no Event; a DaemonSet
// that runs neither ztunnel nor istio-cni is not watched; a deleted one's
// series ends.
func TestDataPlaneLeavingOnDeleteIsReported(t *testing.T) {
	e := newEnv(t, ztunnelDS.DeepCopy())
	gauge := e.ex.metrics.NotOnDelete
	onDelete := ztunnelDS.DeepCopy()
	rolling := ztunnelDS.DeepCopy()
	rolling.Spec.UpdateStrategy.Type = appsv1.RollingUpdateDaemonSetStrategyType

	e.ex.daemonSetEvent(nil, onDelete) // added, as the informer lists it
	if v := testutil.ToFloat64(gauge.WithLabelValues(istioNS, "ztunnel")); v != 0 || len(e.emitted()) != 0 {
		t.Fatalf("on OnDelete: series %v, events; want 0 and none", v)
	}
	e.ex.daemonSetEvent(onDelete, rolling)
	events := e.emitted()
	if v := testutil.ToFloat64(gauge.WithLabelValues(istioNS, "ztunnel")); v != 1 || !hasEvent(events, "Warning LeftOnDelete updateStrategy changed from OnDelete to RollingUpdate") {
		t.Fatalf("left OnDelete: series %v, events %q; want 1 and a Warning", v, events)
	}
	e.ex.daemonSetEvent(rolling, onDelete)
	if v := testutil.ToFloat64(gauge.WithLabelValues(istioNS, "ztunnel")); v != 0 || len(e.emitted()) != 0 {
		t.Fatalf("back on OnDelete: series %v; want 0 and no event", v)
	}

	other := targetDS("node-exporter", "ne-uid", map[string]string{"app": "node-exporter"}, "quay.io/prometheus/node-exporter:v1.8.0")
	rollingOther := other.DeepCopy()
	rollingOther.Spec.UpdateStrategy.Type = appsv1.RollingUpdateDaemonSetStrategyType
	e.ex.daemonSetEvent(other, rollingOther)
	if n := testutil.CollectAndCount(gauge); n != 1 || len(e.emitted()) != 0 {
		t.Fatalf("another DaemonSet: %d series, events; want only ztunnel's, no event", n)
	}

	if err := e.dss.Delete(ztunnelDS); err != nil {
		t.Fatal(err)
	}
	e.ex.daemonSetEvent(nil, cache.DeletedFinalStateUnknown{Key: istioNS + "/ztunnel", Obj: onDelete})
	if n := testutil.CollectAndCount(gauge); n != 0 {
		t.Errorf("deleted: %d series, want none", n)
	}
}
