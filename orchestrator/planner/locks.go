package planner

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// Keys other maintenance tools own, read to honour their locks; Kured's is
// also written, to hold it while a node is in flight (kuredlock.go).
// docs/maintenance.md says how each is read.
const (
	// AnnotationKuredLock is Kured's lock, on its own DaemonSet: JSON naming
	// the node being rebooted ({"nodeID": …}), or several ({"locks": [{"nodeID": …}]}).
	AnnotationKuredLock = "weave.works/kured-node-lock"
	// LabelSUCPlan marks the job pods of a system-upgrade-controller plan;
	// LabelSUCNode names the node the job upgrades.
	LabelSUCPlan = "upgrade.cattle.io/plan"
	LabelSUCNode = "upgrade.cattle.io/node"
)

// kuredHolders maps each node a Kured lock holds to why, from every
// DaemonSet carrying the lock annotation (any namespace and name, so Kured's
// --ds-name and --ds-namespace need no setting here). A lock nodewise cannot
// read holds nothing but is reported, so a Kured version with another format
// shows up in status instead of being ignored in silence. An expired lock
// (its TTL passed at now) holds nothing, as for Kured, which takes it over:
// a Kured pod that died holding the lock with --lock-ttl set keeps no node
// waiting past the TTL. Nothing announces the expiry, so the pass after it
// (at the latest the resync's) starts the node.
func KuredHolders(dss []*appsv1.DaemonSet, now time.Time) (map[string]string, []string) {
	held := map[string]string{}
	var unreadable []string
	for _, ds := range dss {
		v, ok := ds.Annotations[AnnotationKuredLock]
		if !ok || v == "" {
			continue
		}
		// One lock or a multi-lock: whichever fields the value has.
		var l struct {
			KuredLockValue
			kuredMultiLock
		}
		if err := json.Unmarshal([]byte(v), &l); err != nil {
			unreadable = append(unreadable, fmt.Sprintf("Kured lock on DaemonSet %s/%s is not JSON: %v", ds.Namespace, ds.Name, err))
			continue
		}
		for _, h := range append([]KuredLockValue{l.KuredLockValue}, l.Locks...) {
			if h.NodeID != "" && !h.expired(now) {
				held[h.NodeID] = fmt.Sprintf("held by Kured's lock (%s on DaemonSet %s/%s)", AnnotationKuredLock, ds.Namespace, ds.Name)
			}
		}
	}
	return held, unreadable
}

// sucHolders maps each node a system-upgrade-controller job is upgrading
// (a job pod labelled with its plan, not finished) to why.
func SUCHolders(pods []*corev1.Pod) map[string]string {
	held := map[string]string{}
	for _, p := range pods {
		plan, ok := p.Labels[LabelSUCPlan]
		if !ok || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		node := p.Labels[LabelSUCNode]
		if node == "" {
			node = p.Spec.NodeName
		}
		if node != "" {
			held[node] = fmt.Sprintf("being upgraded by system-upgrade-controller plan %s (pod %s/%s)", plan, p.Namespace, p.Name)
		}
	}
	return held
}

// sucPodSelector selects the job pods of any SUC plan.
func SUCPodSelector() labels.Selector {
	r, _ := labels.NewRequirement(LabelSUCPlan, selection.Exists, nil)
	return labels.NewSelector().Add(*r)
}

// heldByOthers is a node unavailable through someone else: held by another
// tool's lock, or cordoned while nodewise does not have it in flight (a
// failed node is counted as nodewise's own). A node the rollout finished
// that stays cordoned (prior-unschedulable, keep-cordoned) counts too: it is
// out of the fleet, whoever keeps it out.
func heldByOthers(n model.NodeView) bool {
	if model.InFlight(n.State) || n.State == v1alpha1.NodeFailed {
		return false
	}
	return n.HeldBy != "" || n.Unschedulable
}

// othersUnavailable counts the rollout's nodes other maintenance makes
// unavailable, when the policy counts them (0 otherwise).
func othersUnavailable(nodes []model.NodeView, p model.Policy) int {
	if !p.CountOthers {
		return 0
	}
	n := 0
	for _, v := range nodes {
		if heldByOthers(v) {
			n++
		}
	}
	return n
}

// heldPrefix starts the status reason of a node another tool holds, so the
// reason is cleared (and only it) once the tool lets go.
const heldPrefix = "waiting: "

// heldReason is a node's status reason given why another tool holds it now
// ("" when none does): only a Pending node shows it.
func HeldReason(ns v1alpha1.NodeStatus, why string) string {
	pending := ns.State == "" || ns.State == v1alpha1.NodePending
	switch {
	case pending && why != "":
		return heldPrefix + why
	case strings.HasPrefix(ns.Reason, heldPrefix):
		return ""
	}
	return ns.Reason
}

// notReadyWaits: a node NotReady before its turn is not started (its agent
// and kubelet cannot take a swap, and it would hold a slot); it goes when
// it is Ready again.
func notReadyWaits(n model.NodeView) bool {
	return !n.Ready && (n.State == "" || n.State == v1alpha1.NodePending)
}

// waitReason is why a node due to start waits ("" when it may start).
func waitReason(n model.NodeView) string {
	switch {
	case n.HeldBy != "":
		return n.HeldBy
	case blockedWaits(n):
		return n.Blocked
	case notReadyWaits(n):
		return "NotReady: swapped when it is Ready again"
	}
	return ""
}
