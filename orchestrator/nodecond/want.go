// Package nodecond writes the node lifecycle conditions (MaintenanceInProgress,
// DrainInProgress: KEP-5683, Kubernetes 1.37) on the nodes nodewise has
// out, so other tools (alert routing, autoscalers, other maintenance
// tools) see a node in planned maintenance. What a node should carry is
// decided from its record (FromRecord, Diff: pure); Writer writes the
// difference through the node's status subresource, by condition type, so
// the kubelet's conditions and other writers' are never touched.
package nodecond

import (
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/locks"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
)

// Cond is the reason and message of a condition nodewise sets True.
type Cond struct{ Reason, Message string }

// Want is the lifecycle conditions nodewise means a node to carry.
type Want struct {
	// Maintenance is nodewise's MaintenanceInProgress (nil: none of nodewise's).
	Maintenance *Cond
	// Drain is nodewise's DrainInProgress (nil: none of nodewise's).
	Drain *Cond
	// DrainAsIs leaves nodewise's DrainInProgress as it stands, Drain
	// aside: only a drain sets it (whether a Drain step evicts anything is
	// its policy's choice, which the record alone does not tell).
	DrainAsIs bool
}

// InFlight is MaintenanceInProgress while rollout has the node out: from
// its slot (the first step) until it is handed back.
func InFlight(rollout string) *Cond {
	return &Cond{locks.ReasonInFlight, fmt.Sprintf("nodewise NodeRollout %s has the node out: its Istio data plane (ztunnel, istio-cni) is swapped and judged", rollout)}
}

// Draining is DrainInProgress while rollout's Drain step evicts the node's pods.
func Draining(rollout string) *Cond {
	return &Cond{locks.ReasonDraining, fmt.Sprintf("nodewise NodeRollout %s is draining the node before its data-plane swap", rollout)}
}

// Halted is MaintenanceInProgress on a node the rollout failed on and left
// cordoned for a person: it is still out, for nodewise's reason.
func Halted(rollout string) *Cond {
	return &Cond{locks.ReasonHalted, fmt.Sprintf("nodewise NodeRollout %s halted on the node and left it cordoned for a person: it stays out until `nodewise retry` or an uncordon hands it back", rollout)}
}

// FromRecord is what the node should carry given its record (rec), its
// cordon, and whether the record's rollout still exists (live). A rollout
// has the node out while the record is in flight (Preflight through Gate,
// AbortCleanup); a Failed node it cordoned and left cordoned is still out
// (Halted). Anything else, or a rollout that is gone, carries none of
// nodewise's conditions. DrainInProgress is left as it stands during the
// Drain step and cleared otherwise.
func FromRecord(rec nodestep.Record, unschedulable bool, live func(name string, uid types.UID) bool) Want {
	if rec.RolloutUID == "" || !live(rec.Rollout, rec.RolloutUID) {
		return Want{}
	}
	switch {
	case model.InFlight(rec.Step):
		return Want{Maintenance: InFlight(rec.Rollout), DrainAsIs: rec.Step == v1alpha1.NodeDrain}
	case rec.Step == v1alpha1.NodeFailed && rec.CordonedBy != "" && unschedulable:
		return Want{Maintenance: Halted(rec.Rollout)}
	}
	return Want{}
}

// Change is what a status patch sets and removes.
type Change struct {
	Set    []corev1.NodeCondition
	Remove []corev1.NodeConditionType
}

// Empty says there is nothing to write.
func (c Change) Empty() bool { return len(c.Set) == 0 && len(c.Remove) == 0 }

// Diff is the change that brings have (a node's conditions) to w at now.
// It sets a condition nodewise wants unless another writer's of that type
// is True (theirs already says so, and is theirs to clear), keeping its
// transition time when it was True already; it removes only conditions
// nodewise wrote.
func Diff(have []corev1.NodeCondition, w Want, now time.Time) Change {
	var c Change
	for _, t := range locks.LifecycleConditions {
		want := w.Maintenance
		if t == corev1.NodeDrainInProgress {
			if w.DrainAsIs && w.Drain == nil {
				continue
			}
			want = w.Drain
		}
		cur := find(have, t)
		switch {
		case want == nil:
			if cur != nil && locks.Nodewise(*cur) {
				c.Remove = append(c.Remove, t)
			}
		case cur != nil && cur.Status == corev1.ConditionTrue && !locks.Nodewise(*cur):
			// another writer's: left alone
		case cur != nil && cur.Status == corev1.ConditionTrue && cur.Reason == want.Reason && cur.Message == want.Message:
			// as wanted
		default:
			nc := corev1.NodeCondition{Type: t, Status: corev1.ConditionTrue, Reason: want.Reason, Message: want.Message,
				LastHeartbeatTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now)}
			if cur != nil && cur.Status == corev1.ConditionTrue {
				nc.LastTransitionTime = cur.LastTransitionTime
			}
			c.Set = append(c.Set, nc)
		}
	}
	return c
}

func find(cs []corev1.NodeCondition, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}

// Patch is c as a strategic merge patch of the node's status, conditional
// on resourceVersion rv: conditions merge by type, so the patch touches
// only the types it names (a removal is a $patch: delete directive), and a
// write that raced it (another writer's condition of the same type) costs
// a 409 and a decision from the newer copy.
func (c Change) Patch(rv string) ([]byte, error) {
	conds := make([]any, 0, len(c.Set)+len(c.Remove))
	for _, s := range c.Set {
		conds = append(conds, s)
	}
	for _, t := range c.Remove {
		conds = append(conds, map[string]string{"type": string(t), "$patch": "delete"})
	}
	return json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": rv},
		"status":   map[string]any{"conditions": conds},
	})
}
