package e2e

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodewise/nodewise/sim/cluster"
)

// TestDataPlaneLeavingOnDeleteIsReported: with no NodeRollout at all, the
// ztunnel DaemonSet switched to RollingUpdate on the real API server gets
// a Warning Event LeftOnDelete from the orchestrator, and its
// nodewise_dataplane_not_ondelete series reads 1 (0 before).
func TestDataPlaneLeavingOnDeleteIsReported(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, 1)
	ctx := context.Background()
	_, reg := e.runInProcess("strategy")
	series := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "nodewise_dataplane_not_ondelete" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "daemonset" && l.GetValue() == cluster.ZtunnelName {
						return m.GetGauge().GetValue()
					}
				}
			}
		}
		return -1
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) { return series() == 0, nil }); err != nil {
		t.Fatalf("on OnDelete: series %v, want 0", series())
	}
	patch := []byte(`{"spec":{"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":1}}}}`)
	if _, err := e.c.Client.AppsV1().DaemonSets(ns).Patch(ctx, cluster.ZtunnelName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := e.c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + cluster.ZtunnelName + ",reason=LeftOnDelete"})
		return err == nil && len(evs.Items) == 1 && evs.Items[0].Type == "Warning" && series() == 1, nil
	})
	if err != nil {
		t.Fatalf("after RollingUpdate: no Warning LeftOnDelete on the DaemonSet, or series %v (want 1)", series())
	}
}
