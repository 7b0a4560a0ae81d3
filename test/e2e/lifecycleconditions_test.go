package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/locks"
	"github.com/nodewise/nodewise/sim/cluster"
)

// setCondition writes a node condition by type through the node's status
// subresource, as another maintenance tool (or an admin) does.
func (e *env) setCondition(node string, c corev1.NodeCondition) {
	e.t.Helper()
	c.LastHeartbeatTime, c.LastTransitionTime = metav1.Now(), metav1.Now()
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{c}}})
	if _, err := e.c.Client.CoreV1().Nodes().Patch(context.Background(), node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		e.t.Fatal(err)
	}
}

// conditions are node's conditions by type, as the API server has them.
func (e *env) conditions(node string) map[corev1.NodeConditionType]corev1.NodeCondition {
	e.t.Helper()
	n, err := e.c.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[corev1.NodeConditionType]corev1.NodeCondition{}
	for _, c := range n.Status.Conditions {
		out[c.Type] = c
	}
	return out
}

// waitConditions waits until ok holds of node's conditions, and fails
// with what they were.
func (e *env) waitConditions(node, what string, ok func(map[corev1.NodeConditionType]corev1.NodeCondition) bool) {
	e.t.Helper()
	var last map[corev1.NodeConditionType]corev1.NodeCondition
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		last = e.conditions(node)
		return ok(last), nil
	}); err != nil {
		e.t.Fatalf("%s: %s never; its conditions: %+v", node, what, last)
	}
}

// nodewiseConditions names the lifecycle conditions of nodewise's on node.
func nodewiseConditions(cs map[corev1.NodeConditionType]corev1.NodeCondition) string {
	var out []string
	for _, t := range locks.LifecycleConditions {
		if c, ok := cs[t]; ok && locks.Nodewise(c) {
			out = append(out, fmt.Sprintf("%s=%s (%s)", t, c.Status, c.Reason))
		}
	}
	return strings.Join(out, ", ")
}

// TestLifecycleConditionsWhileOut: the canary nodewise holds in its Drain
// (a PodDisruptionBudget at zero) carries MaintenanceInProgress and
// DrainInProgress, True, with nodewise's reasons and the rollout's name,
// beside the kubelet's own conditions; a node nodewise does not have out
// carries none, though a crashed leader had left one of nodewise's there,
// and another writer's condition on it stays as written. The leader stops
// mid-drain (its conditions stay: the node is still out), the rollout is
// aborted, and the successor that hands the canary back clears both.
func TestLifecycleConditionsWhileOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, 1)
	const name = "lifecycle"
	other := e.c.Nodes[1].Name
	e.setCondition(other, corev1.NodeCondition{Type: corev1.NodeMaintenanceInProgress, Status: corev1.ConditionTrue, Reason: locks.ReasonInFlight,
		Message: "nodewise NodeRollout gone has the node out"}) // a crashed leader's, no record behind it
	theirs := corev1.NodeCondition{Type: corev1.NodeDrainInProgress, Status: corev1.ConditionFalse, Reason: "FirmwareDrainDone", Message: "BIOS 2.1"}
	e.setCondition(other, theirs)

	canary, stop := e.stuckInDrainBy("first", name, nil)
	e.waitConditions(canary, "MaintenanceInProgress and DrainInProgress of nodewise's", func(cs map[corev1.NodeConditionType]corev1.NodeCondition) bool {
		m, d := cs[corev1.NodeMaintenanceInProgress], cs[corev1.NodeDrainInProgress]
		return m.Status == corev1.ConditionTrue && m.Reason == locks.ReasonInFlight && strings.Contains(m.Message, "NodeRollout "+name+" ") &&
			d.Status == corev1.ConditionTrue && d.Reason == locks.ReasonDraining && strings.Contains(d.Message, "NodeRollout "+name+" ")
	})
	if r := e.conditions(canary)[corev1.NodeReady]; r.Status != corev1.ConditionTrue || r.Reason != "KubeletReady" {
		t.Errorf("the kubelet's Ready condition on %s is %+v, want it as the kubelet wrote it", canary, r)
	}
	e.waitConditions(other, "none of nodewise's (the stale one cleared)", func(cs map[corev1.NodeConditionType]corev1.NodeCondition) bool {
		return nodewiseConditions(cs) == ""
	})
	if got := e.conditions(other)[corev1.NodeDrainInProgress]; got.Status != theirs.Status || got.Reason != theirs.Reason || got.Message != theirs.Message {
		t.Errorf("another writer's DrainInProgress on %s is %+v, want it left as %+v", other, got, theirs)
	}

	// The leader goes mid-drain: the canary is still out, and says so.
	stop()
	if got := nodewiseConditions(e.conditions(canary)); !strings.Contains(got, "MaintenanceInProgress=True") || !strings.Contains(got, "DrainInProgress=True") {
		t.Fatalf("after the leader stopped mid-drain %s carries %q, want both of nodewise's (it is still out)", canary, got)
	}
	e.patch(name, `{"spec":{"abort":true}}`)
	e.runInProcess("second")
	e.waitSchedulable(canary, 30*time.Second)
	e.waitConditions(canary, "no condition of nodewise's once handed back", func(cs map[corev1.NodeConditionType]corev1.NodeCondition) bool {
		return nodewiseConditions(cs) == ""
	})
	if r := e.conditions(canary)[corev1.NodeReady]; r.Status != corev1.ConditionTrue {
		t.Errorf("the kubelet's Ready condition on %s is %+v after nodewise's went", canary, r)
	}
}

// TestOtherWritersConditionHoldsNode: another tool's MaintenanceInProgress
// (True, its own reason) on a node is other maintenance, as Kured's lock
// is: the node is held (its status entry says why) and counts against
// maxUnavailable, so with 1 no node starts. Once the tool sets it False the
// rollout goes through every node; nodewise leaves no condition of its own
// behind.
func TestOtherWritersConditionHoldsNode(t *testing.T) {
	t.Parallel()
	const nodes, name = 2, "held-by-condition"
	e := newEnv(t, nodes, 1)
	held := e.c.Nodes[nodes-1].Name
	theirs := corev1.NodeCondition{Type: corev1.NodeMaintenanceInProgress, Status: corev1.ConditionTrue, Reason: "FirmwareUpdate", Message: "BIOS 2.1, rack 7"}
	e.setCondition(held, theirs)
	e.runInProcess("solo")
	e.upgrade("1.28.1")
	e.apply(rollout(name, func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
	}))
	heldReason := func(nr *v1alpha1.NodeRollout) bool {
		for _, ns := range nr.Status.Nodes {
			if ns.Name == held && strings.Contains(ns.Reason, "in maintenance by another tool") && strings.Contains(ns.Reason, "MaintenanceInProgress=True") &&
				strings.Contains(ns.Reason, "FirmwareUpdate") {
				return true
			}
		}
		return false
	}
	if nr := e.waitRollout(name, time.Minute, "the held node's reason", func(nr *v1alpha1.NodeRollout) bool {
		return heldReason(nr) || nr.Status.Phase == v1alpha1.PhaseCompleted
	}); !heldReason(nr) {
		t.Fatalf("rollout %s (counts %+v) with no status reason holding %s for the other tool's maintenance", nr.Status.Phase, nr.Status.Counts, held)
	}
	time.Sleep(2 * time.Second) // a broken budget would start the other node now
	if busy := e.nodewiseBusy(context.Background(), name); busy != "" {
		t.Fatalf("nodewise started a node while another tool's maintenance filled maxUnavailable: %s", busy)
	}
	if got := e.conditions(held)[corev1.NodeMaintenanceInProgress]; got.Reason != theirs.Reason || got.Status != corev1.ConditionTrue {
		t.Fatalf("the other tool's condition on %s is %+v, want it as written", held, got)
	}

	e.setCondition(held, corev1.NodeCondition{Type: corev1.NodeMaintenanceInProgress, Status: corev1.ConditionFalse, Reason: "FirmwareUpdate", Message: "done"})
	nr := e.waitPhase(name, 2*time.Minute, v1alpha1.PhaseCompleted, v1alpha1.PhaseHalted)
	if nr.Status.Phase != v1alpha1.PhaseCompleted || nr.Status.Counts.Done != nodes {
		t.Fatalf("phase %s (%s), counts %+v: want every node Done", nr.Status.Phase, nr.Status.HaltReason, nr.Status.Counts)
	}
	for _, n := range e.c.Nodes {
		e.waitConditions(n.Name, "no condition of nodewise's after the rollout", func(cs map[corev1.NodeConditionType]corev1.NodeCondition) bool {
			return nodewiseConditions(cs) == ""
		})
	}
}

// TestHaltedNodeLeftCordonedStaysInMaintenance: a ztunnel that never gets
// Ready halts the rollout on its node and leaves the node cordoned for a
// person; the node is still out for nodewise's reason, so it keeps
// MaintenanceInProgress, now NodewiseHalted, until a person uncordons it.
func TestHaltedNodeLeftCordonedStaysInMaintenance(t *testing.T) {
	t.Parallel()
	const name = "halted-conditions"
	e := newEnv(t, 2, 1)
	e.upgrade("1.28.1")
	e.setImageTag(cluster.ZtunnelName, "1.28.1"+cluster.TagNeverReady)
	e.runInProcess("solo")
	e.apply(rollout(name, func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
		s.SwapTimeout = &v1alpha1.Duration{Duration: 3 * time.Second}
	}))
	nr := e.waitPhase(name, time.Minute, v1alpha1.PhaseHalted, v1alpha1.PhaseCompleted)
	halted := ""
	for _, ns := range nr.Status.Nodes {
		if ns.State == v1alpha1.NodeFailed {
			halted = ns.Name
		}
	}
	if nr.Status.Phase != v1alpha1.PhaseHalted || halted == "" || !e.unschedulable()[halted] {
		t.Fatalf("phase %s, failed node %q (cordoned: %v): want Halted on a node left cordoned", nr.Status.Phase, halted, e.unschedulable())
	}
	e.waitConditions(halted, "MaintenanceInProgress NodewiseHalted", func(cs map[corev1.NodeConditionType]corev1.NodeCondition) bool {
		m := cs[corev1.NodeMaintenanceInProgress]
		return m.Status == corev1.ConditionTrue && m.Reason == locks.ReasonHalted && strings.Contains(m.Message, "NodeRollout "+name+" halted")
	})
	if _, err := e.c.Client.CoreV1().Nodes().Patch(context.Background(), halted, types.MergePatchType, []byte(`{"spec":{"unschedulable":false}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitConditions(halted, "no condition of nodewise's once a person uncordoned it", func(cs map[corev1.NodeConditionType]corev1.NodeCondition) bool {
		return nodewiseConditions(cs) == ""
	})
}
