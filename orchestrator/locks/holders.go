// Package locks reads the locks other maintenance tools hold on nodes (Kured's
// lock on its DaemonSet, system-upgrade-controller's job pods, another
// writer's node lifecycle conditions) and decides
// the value of Kured's lock nodewise writes to hold it while nodes are in
// flight. It is pure: the orchestrator reads and writes the objects.
package locks

import (
	"encoding/json"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// Keys other maintenance tools own, read to honour their locks; Kured's is
// also written, to hold it while a node is in flight (orchestrator/kuredlock).
// docs/maintenance.md says how each is read.
const (
	// AnnotationKured is Kured's lock, on its own DaemonSet: JSON naming
	// the node being rebooted ({"nodeID": …}), or several ({"locks": [{"nodeID": …}]}).
	AnnotationKured = "weave.works/kured-node-lock"
	// LabelSUCPlan marks the job pods of a system-upgrade-controller plan;
	// LabelSUCNode names the node the job upgrades.
	LabelSUCPlan = "upgrade.cattle.io/plan"
	LabelSUCNode = "upgrade.cattle.io/node"
)

// KuredHolders maps each node a Kured lock holds to why, from every
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
		v, ok := ds.Annotations[AnnotationKured]
		if !ok || v == "" {
			continue
		}
		// One lock or a multi-lock: whichever fields the value has.
		var l struct {
			KuredValue
			kuredMultiLock
		}
		if err := json.Unmarshal([]byte(v), &l); err != nil {
			unreadable = append(unreadable, fmt.Sprintf("Kured lock on DaemonSet %s/%s is not JSON: %v", ds.Namespace, ds.Name, err))
			continue
		}
		for _, h := range append([]KuredValue{l.KuredValue}, l.Locks...) {
			if h.NodeID != "" && !h.expired(now) {
				held[h.NodeID] = fmt.Sprintf("held by Kured's lock (%s on DaemonSet %s/%s)", AnnotationKured, ds.Namespace, ds.Name)
			}
		}
	}
	return held, unreadable
}

// SUCHolders maps each node a system-upgrade-controller job is upgrading
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

// SUCPodSelector selects the job pods of any SUC plan.
func SUCPodSelector() labels.Selector {
	r, _ := labels.NewRequirement(LabelSUCPlan, selection.Exists, nil)
	return labels.NewSelector().Add(*r)
}
